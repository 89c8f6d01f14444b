"""dependency-injector resources; they live in `proletarian_di.contrib.di` (extra `di`)."""

from .contrib.di import *  # noqa: F403
from .contrib.di import __all__ as __all__
