"""Whether the cluster serves kube-scheduler's gang and topology placement, for ``zone-chooser:
auto``: probed at start and every few minutes in the background, never during an admission.

One ``dryRun=All`` create of a PodGroup with a topology constraint answers both questions the
apiserver can answer (k8s v1.37.2 ``pkg/registry/scheduling/podgroup/strategy.go``):

* 404 — ``scheduling.k8s.io/v1beta1`` PodGroups are not served (``--runtime-config``, or the
  ``GenericWorkload`` gate, is off): hold mode;
* created without ``spec.schedulingConstraints`` — the apiserver dropped the field because
  ``TopologyAwareWorkloadScheduling`` is off: the scheduler would gang the pods but not keep them
  in one zone, so hold mode;
* created with it — scheduler mode.

kube-scheduler's own gates cannot be seen from the API; a cluster that turns the gates on for the
apiserver and not for the scheduler is misconfigured, and ``zone-chooser: hold`` is the answer.
Any other error (403, 5xx, timeout) keeps the last answer (hold mode until one is known).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from webhook.core import podgroups
from webhook.core.objects import Obj
from webhook.core.policies import Manifest
from webhook.kube import errors
from webhook.serve import loops

log = logging.getLogger("podium.discovery")

#: Seconds between two probes: a gate turned on or off is seen within this long.
RECHECK_SECONDS = 300.0


class SchedulerSupport:
    """The cached answer (``available``) and the loop that keeps it current."""

    def __init__(
        self,
        dry_run_create: Callable[[Manifest], Awaitable[Obj]],
        *,
        namespace: str,
        zone_label: str,
        interval_seconds: float = RECHECK_SECONDS,
    ) -> None:
        self._create = dry_run_create
        self.namespace = namespace
        self.zone_label = zone_label
        self.interval_seconds = interval_seconds
        self.available = False
        #: Why the last probe answered as it did (logged when the answer changes).
        self.why = "not probed yet"

    def __call__(self) -> bool:
        return self.available

    async def check(self) -> bool:
        """Probe once; update and return ``available``."""
        try:
            created = await self._create(podgroups.probe(self.namespace, self.zone_label))
        except errors.NotFound:
            self._settle(False, f"{podgroups.API_VERSION} PodGroups are not served")
        except errors.ApiError as err:
            log.warning(
                "cannot tell whether PodGroups are served (%s); keeping the last answer", err
            )
        else:
            if podgroups.keeps_topology(created):
                self._settle(True, "PodGroups with topology constraints are served")
            else:
                self._settle(
                    False,
                    "PodGroups are served but the apiserver drops topology constraints "
                    "(TopologyAwareWorkloadScheduling is off)",
                )
        return self.available

    def _settle(self, available: bool, why: str) -> None:
        if (available, why) != (self.available, self.why):
            log.info(
                "zone-chooser auto: %s: %s chooses zones",
                why,
                "kube-scheduler" if available else "podium's hold",
            )
        self.available, self.why = available, why

    async def run(self, stop: asyncio.Event) -> None:
        """Probe every ``interval_seconds`` until ``stop``."""
        await loops.every(
            self.interval_seconds, self.check, stop, what="probing for PodGroups", log=log
        )
