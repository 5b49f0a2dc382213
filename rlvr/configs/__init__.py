"""The shipped experiment configs: `from rlvr.configs import quickstart`, `rlvr --config=quickstart`.

A checkout keeps them in its top-level `configs/` folder (`python launch.py
--config=configs/quickstart.py`); the wheel installs that folder as this package (pyproject.toml
maps `rlvr.configs` to `configs/`), so this file is used only in a checkout, where it makes the
package's modules and `__file__` those of `configs/`, as an installed package has them.
"""

import os

__path__ = [os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "configs")]
__file__ = os.path.join(__path__[0], "__init__.py")
