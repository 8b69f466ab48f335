"""Each real operator, run as a local process, creates the pods of its own example.

No podium here: this proves the harness (build, start, webhooks, CRDs) and pins down the shape
of what each operator creates — names, labels, owner chains, the env podium reads. Opt-in with
``PODIUM_E2E_OPERATORS=all`` (or a comma list of build names); see docs/operators.md.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ENV, enabled_operators
from .frameworks import FRAMEWORKS, Framework
from .observe import Observation, observe, summarize
from .runner import OperatorPool, fresh_namespace

pytestmark = pytest.mark.e2e


@dataclasses_free := None  # noqa: B018 - placeholder removed below
