"""Tool-calling agents in a checkpoint's own chat format.

tools.py (tools from Python functions + JSON schema, tool environments), parsers.py (Hermes/Qwen
and Llama 3.x tool-call formats), chat.py (rendering with the chat template, per-turn token
diffs, assistant-token masks), trajectories.py (JSONL / Parquet trajectory files, replay check,
pivots), turn_verifier.py (functional tool-call equivalence). Host-side code: nothing here runs
under jit.
"""

import os

TEMPLATES_DIR = os.path.join(os.path.dirname(__file__), "templates")
QWEN_TOOLS_TEMPLATE_PATH = os.path.join(TEMPLATES_DIR, "qwen_tools.jinja")


def qwen_tools_template() -> str:
    """The shipped Qwen2.5-style tool chat template (Jinja text)."""
    with open(QWEN_TOOLS_TEMPLATE_PATH, encoding="utf-8") as f:
        return f.read()
