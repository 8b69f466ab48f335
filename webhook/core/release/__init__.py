"""Which held gangs to release now, into which zone, and why the others wait. Pure.

``zone-chooser: hold`` admits a new gang's pods behind podium's scheduling gate
(``labels.HOLD_GATE``, ``mutation.hold``). ``plan(view, settings, now=...)`` reads the view and
answers, per held gang, either ``Release`` (the zone, the record and policy to write first, the
pods to ungate) or ``Wait`` (why, and its place in line). ``webhook.serve.releaser`` carries a
plan out. The rules, in the order they apply:

* **Completion.** A gang with a record naming a zone and some pod already released is committed
  to that zone: every pod still gated is released into it at once, without a fit check (a leader
  that died half-way through a release leaves exactly this, and the next pass finishes it).
* **Following.** A gang with members bound to a node that podium never held (``core.running``:
  created before its namespace opted in, while podium was down, or placed by someone else) is
  released at once into the zone they run in (the coordinator's first), without a fit check:
  those pods are never gated, so the gang would never be ready.
* **Ready.** A gang is decided only when the pods it needs exist (held + released, not
  finished; ``needed``): its size read from the job, or — for an elastic job or a staged start
  (``adapters.first_stage``) — the pods its operator creates first: an elastic PyTorchJob's
  ``elasticPolicy.minReplicas`` workers, MPI's workers under ``WaitForWorkersReady`` (the
  launcher comes once they are ready), JobSet's first replicated job under ``InOrder`` or those
  without ``dependsOn``, an LWS group's leader under ``LeaderReady``. Its whole demand is still
  what must fit, and once released the pods still to come keep their room in its zone
  (``room._unborn``) until they are created and bind. Where the job cannot tell (a guessed size, an
  autoscaled RayCluster, a Volcano job: ``podgroups.unfit``), or a gang decided before has no
  pod left running (its first stage finished), the pods present are taken once their count has
  not changed since the previous pass (``stable``).
* **Fit, node by node.** On the nodes of a zone the gang's pods may use (``candidate_zones`` of
  one held pod's constraint), minus bound pods (the view), first the pods already heading there
  (released, not yet bound: they reserve room until they bind, finish or go) and the gangs this
  pass released there are placed as kube-scheduler's default scoring spreads them, each on the
  node with the most free (``zones.spread_into``: where they will land is not known until they
  bind, and first-fit would leave whole nodes free that the scheduler takes apart), then the
  gang is packed (first-fit decreasing on the primary resource, ``zones.pack_into``). Among
  zones where the whole gang fits, ``placement`` chooses.
* **Order.** Held gangs are walked oldest first (the creationTimestamp of their oldest held pod;
  ties by gang key). With ``hold-order: oldest-first`` (the default) the first ready gang that
  fits nowhere becomes the **head**: it reserves the zone where it comes closest (the most free
  primary resource among zones whose whole allocatable could hold it), and later gangs may
  backfill only into other zones. Small gangs thus use room a big one cannot use yet, never the
  zone it waits for; one head per pass. With ``fit-first`` there is no head: every gang that
  fits somewhere goes.
* **Buffers** (``capacity-buffers: on``, ``buffers``). A ready gang that fits no zone, before the
  rules below, gets a CapacityBuffer in the zone where the fewest new nodes make it fit: it waits
  for the autoscaler as the head (that zone kept for it), and neither the too-big wait nor the
  timeout applies while its buffer asks. A gang over a cap, or whose buffer was stopped at its
  deadline, goes on to the rules below, its why saying so.
* **Too big.** A gang no zone could hold even empty (``neverfits``: every node its pods may use
  free) waits, said at once — before its last pod exists when the job tells its size — with the
  ways out, until an admin acts (``too-big: hold``), or is released unpinned with a job-wide
  policy once ready (``too-big: spread``).
* **Timeout.** A gang held longer than ``hold-timeout-seconds`` that still fits nowhere is
  released as ``no-fit`` says: pinned to the roomiest zone (so an autoscaler, which never scales
  up for gated pods, scales that zone) or unpinned.
* **Re-decision.** A gang with a record but no pod released is decided like a new one; its record
  is replaced with the new zone.

The package, one question a module: ``gangs`` (the held gangs, what a plan answers and when a gang
is ready), ``room`` (how a gang fits each zone node by node, the pods heading there counted),
``waits`` (why a gang waits, its buffer included), ``releases`` (every way a gang is released,
with the record and policy to write first), ``below`` (the domain below the zone:
``topology-levels``), ``planning`` (``plan``: the rules above in their order) and ``patch`` (the
JSON Patch that releases one pod).
"""

from webhook.core.release.gangs import (
    ADMIN,
    COMPLETED,
    TIMEOUT,
    TOO_BIG_SPREAD,
    HeldGang,
    Plan,
    PodRef,
    Release,
    Wait,
    held_gangs,
    may_release,
    needed,
    size_of,
)
from webhook.core.release.patch import release_patch
from webhook.core.release.planning import plan

__all__ = [
    "ADMIN",
    "COMPLETED",
    "TIMEOUT",
    "TOO_BIG_SPREAD",
    "HeldGang",
    "Plan",
    "PodRef",
    "Release",
    "Wait",
    "held_gangs",
    "may_release",
    "needed",
    "plan",
    "release_patch",
    "size_of",
]
