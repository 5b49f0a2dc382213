"""Train a policy with verifiable rewards: `python launch.py --config=configs/quickstart.py --workdir=DIR`.

`--mode=eval` evaluates and `--mode=export` exports the run in DIR (from its saved config when
`--config` is left out); `--help` lists the flags, documented in `rlvr/launch.py` (also installed
as `python -m rlvr.launch` and the `rlvr` command).
"""

from rlvr.launch import run

if __name__ == "__main__":
    run()
