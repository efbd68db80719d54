"""``python -m stbeval``: the same commands as ``stbproxy eval``, usable on their own."""

from .cli import eval_group

if __name__ == "__main__":
    eval_group(prog_name="python -m stbeval")
