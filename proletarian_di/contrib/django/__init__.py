"""Django integration: a `django.tasks` backend (`ProletarianBackend`) and the
`proletarian_worker` management command. Needs Django (`proletarian-di[django]`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    import django  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "proletarian_di.contrib.django needs Django: pip install 'proletarian-di[django]'"
    ) from exc

if TYPE_CHECKING:
    from .backend import ProletarianBackend
    from .results import install

__all__ = ["ProletarianBackend", "install"]


def __getattr__(name: str) -> Any:
    """Import the backend lazily, so that listing the app in INSTALLED_APPS stays light."""
    if name == "ProletarianBackend":
        from .backend import ProletarianBackend

        return ProletarianBackend
    if name == "install":
        from .results import install

        return install
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
