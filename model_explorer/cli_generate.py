"""`model-explorer generate`: stream a completion to stdout, then print the timing report."""

from __future__ import annotations

import sys

EXIT_OK, EXIT_FAILED, EXIT_UNREADABLE = 0, 1, 2


def run_generate(args) -> int:
    """Called by model_explorer.cli with args.source (None: the bundled sample), prompt,
    max_new_tokens, device, chat, temperature, seed. Returns the exit code."""
    from .model.config import UnsupportedModel
    from .runtime.api import load_model

    source = getattr(args, "source", None)
    label = source if source is not None else "the bundled SmolLM2 sample"
    try:
        model = load_model(source, getattr(args, "device", "auto") or "auto")
    except (FileNotFoundError, UnsupportedModel) as e:
        print(f"model-explorer: cannot load {label}: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    except (RuntimeError, ValueError, OSError) as e:
        print(f"model-explorer: cannot load {label}: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"[{model.config.architecture}, {model.config.num_layers} layers, on {model.device}; "
          f"loaded in {model.load_seconds:.2f} s]", file=sys.stderr, flush=True)

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    try:
        result = model.generate(args.prompt, max_new_tokens=args.max_new_tokens,
                                temperature=getattr(args, "temperature", 0.0) or 0.0,
                                seed=getattr(args, "seed", None), chat=bool(getattr(args, "chat", False)),
                                stream=stream)
    except ValueError as e:  # e.g. --chat on a model without a chat template
        print(f"\nmodel-explorer: cannot generate: {e}", file=sys.stderr)
        return EXIT_FAILED
    print("\n---")
    print(result.report())
    return EXIT_OK
