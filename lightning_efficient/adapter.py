"""The base class of this package's callbacks: a callback of both Lightning packages.

Lightning ships the same Trainer in two packages: ``pytorch_lightning`` and the unified ``lightning``
(``import lightning as L``; ``L.Trainer`` is ``lightning.pytorch.Trainer``). Their classes are distinct objects: a
``pytorch_lightning.Callback`` is not a ``lightning.pytorch.Callback``. ``lightning.pytorch.Trainer`` calls the hooks
of its callbacks by name, so a callback of the other package runs, but every *type* test fails:

* ``lightning.pytorch.cli.LightningCLI`` (jsonargparse) rejects ``class_path: lightning_efficient.ChannelsLast``
  under ``trainer.callbacks`` ("does not correspond to a subclass of Callback") and does not add a callback given
  with ``add_lightning_class_args`` to the Trainer;
* ``L.Trainer(callbacks=ChannelsLast())`` (one callback, not a list) is not recognised as a callback.

:class:`Callback` therefore subclasses ``pytorch_lightning.Callback`` and, where the ``lightning`` package is
installed, ``lightning.pytorch.Callback`` as well, so each callback of this package is an instance of both and works
the same under either Trainer. :data:`LIGHTNING_PACKAGES` lists the Lightning packages found (``recipe()`` accepts the
arguments of either package's ``Trainer``), each once: where one package is an alias of the other (an environment
that maps ``pytorch_lightning`` to ``lightning.pytorch`` in ``sys.modules``, or the reverse), it is one package with one
``Callback`` class, which :class:`Callback` subclasses once (twice would be ``TypeError: duplicate base class``).

Both packages route ``rank_zero_info`` / ``rank_zero_debug`` through the module-level logger of
``lightning_utilities.core.rank_zero``, which each one re-points at its own when imported. Importing
``lightning.pytorch`` here keeps that state as ``pytorch_lightning`` set it; and ``lightning_efficient/__init__.py``
imports this module inside ``lightning_efficient.quiet.keep_lightning_logging``, which leaves Lightning's logging as
it was before ``import lightning_efficient`` wherever a Lightning package had been imported first (so a user's
logging set-up for ``lightning.pytorch`` keeps receiving Lightning's messages). If the ``lightning`` package is
installed but cannot be imported, a ``UserWarning`` says why and the callbacks work with ``pytorch_lightning`` only.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeAlias, Union

import lightning_utilities.core.rank_zero as _rank_zero
import pytorch_lightning

__all__ = [
    "LIGHTNING_PACKAGES",
    "Callback",
    "LightningDataModuleLike",
    "LightningModuleLike",
    "TrainerLike",
    "check_trainer_kwargs",
]


def _unified_lightning() -> ModuleType | None:
    """``lightning.pytorch`` if the ``lightning`` package is installed and importable, else ``None``."""
    try:
        if importlib.util.find_spec("lightning") is None:
            return None
    except (ImportError, ValueError):
        return None
    # Both packages set the module-level logger and deprecation category of lightning_utilities' rank_zero helpers
    # when imported; keep the ones in place (pytorch_lightning's, or those of a `lightning` imported before us).
    saved = {name: getattr(_rank_zero, name, None) for name in ("log", "rank_zero_deprecation_category")}
    try:
        return importlib.import_module("lightning.pytorch")
    except Exception as err:  # noqa: BLE001 - a broken optional install must not break this package
        warnings.warn(
            f"lightning_efficient: the `lightning` package is installed but `import lightning.pytorch` failed "
            f"({type(err).__name__}: {err}); the callbacks work with `pytorch_lightning` only. Reinstall `lightning` "
            "in a version matching torch, or uninstall it.",
            UserWarning,
            stacklevel=2,
        )
        return None
    finally:
        for name, value in saved.items():
            if value is not None:
                setattr(_rank_zero, name, value)


def _distinct(items: tuple) -> tuple:
    """``items`` without repeats, by identity, in order (an aliased package, or its Callback, is listed once)."""
    seen: dict[int, object] = {}
    for item in items:
        seen.setdefault(id(item), item)
    return tuple(seen.values())


def _callback_bases(packages: tuple[ModuleType, ...]) -> tuple[type, ...]:
    """The packages' distinct Callback classes, less any that another one already subclasses (a valid MRO)."""
    classes = _distinct(tuple(package.Callback for package in packages))
    return tuple(c for c in classes if not any(other is not c and issubclass(other, c) for other in classes))


_UNIFIED = _unified_lightning()

#: The Lightning packages whose Trainer runs this package's callbacks: ``pytorch_lightning`` and, where installed,
#: ``lightning.pytorch``; one entry where one is an alias of the other.
LIGHTNING_PACKAGES: tuple[ModuleType, ...] = _distinct(
    (pytorch_lightning,) + ((_UNIFIED,) if _UNIFIED is not None else ())
)

# Either package's LightningModule, LightningDataModule and Trainer, for the signatures that accept both.
if TYPE_CHECKING:
    import lightning.pytorch

    LightningModuleLike: TypeAlias = Union[pytorch_lightning.LightningModule, lightning.pytorch.LightningModule]
    LightningDataModuleLike: TypeAlias = Union[
        pytorch_lightning.LightningDataModule, lightning.pytorch.LightningDataModule
    ]
    TrainerLike: TypeAlias = Union[pytorch_lightning.Trainer, lightning.pytorch.Trainer]
else:  # at run time: the classes of the packages installed (so that typing.get_type_hints() resolves them)
    LightningModuleLike = Union[tuple(p.LightningModule for p in LIGHTNING_PACKAGES)]
    LightningDataModuleLike = Union[tuple(p.LightningDataModule for p in LIGHTNING_PACKAGES)]
    TrainerLike = Union[tuple(p.Trainer for p in LIGHTNING_PACKAGES)]


class Callback(*_callback_bases(LIGHTNING_PACKAGES)):  # type: ignore[misc]
    """Base class of this package's callbacks: a ``pytorch_lightning.Callback`` and, where the ``lightning`` package
    is installed, a ``lightning.pytorch.Callback`` (see the module docstring). Adds no behaviour."""


def check_trainer_kwargs(
    trainer_kwargs: Any, who: str, trainers: Sequence[Any] = (), own: Optional[Callable[..., Any]] = None
) -> None:
    """Raise ``TypeError`` naming every key of ``trainer_kwargs`` that no ``Trainer`` in ``trainers`` (default:
    those of the installed Lightning packages) takes, each with the closest valid name where one is close; ``own``:
    the function the keywords were passed to, whose own parameters are also offered as close names."""
    classes = trainers or [package.Trainer for package in LIGHTNING_PACKAGES]
    valid = {name for cls in classes for name in inspect.signature(cls.__init__).parameters} - {"self"}
    unknown = sorted(set(trainer_kwargs) - valid)
    if unknown:
        import difflib

        mine = inspect.signature(own).parameters.values() if own else ()
        names = sorted(valid | {p.name for p in mine if p.kind is not p.VAR_KEYWORD})
        hints = {u: difflib.get_close_matches(u, names, n=1) for u in unknown}
        text = ", ".join(f"{u!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for u, h in hints.items())
        raise TypeError(
            f"{who}: " + (f"neither {who} nor Trainer takes" if own else "Trainer takes no") + f" argument {text}."
        )
