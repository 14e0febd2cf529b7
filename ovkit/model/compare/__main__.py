"""The child side of compare-model: ``python -m ovkit.model.compare REQUEST.json``."""

from ovkit.model.compare.llama_side import main

if __name__ == "__main__":
    raise SystemExit(main())
