"""Models Trinity can export, by name, across frameworks.

The registry maps a name to the module and builder that make it, so listing
models never imports TensorFlow or PyTorch. `model_spec(name)` fails with
the list of known names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.errors import TrinityError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    framework: str  # "tensorflow" or "torch"
    builder: str  # "module:function"
    default_batch: int
    description: str
    #: The paper's Table 3 size for this model, where it gives one: (ops, edges).
    paper_table3: tuple[int, int] | None = None
    options: dict = field(default_factory=dict)


MODELS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    MODELS[spec.name] = spec
    return spec


def known_models() -> list[str]:
    _load_specs()
    return sorted(MODELS)


def model_spec(name: str) -> ModelSpec:
    _load_specs()
    if name not in MODELS:
        raise TrinityError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}", field="model")
    return MODELS[name]


def _load_specs() -> None:
    # Spec modules only declare names; they import no framework at module level.
    from trinity.models import specs  # noqa: F401
