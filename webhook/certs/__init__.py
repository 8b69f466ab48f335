"""Serving certificates for podium's webhook: issue, store, rotate, and hand to the cluster.

Everything is ECDSA P-256 and made with ``cryptography``. A certificate is due for renewal once 2/3
of its lifetime has passed (cert-manager's rule). The CA rotates without an outage because the
clients (the kube-apiserver, through the webhook's ``caBundle``) learn about a new CA one rotation
step before anything signed by it is served, and forget the old CA only once nothing it signed is
served any more::

    step  ca.pem (signs)  ca-next.pem   ca-bundle.pem   tls.crt signed by
    0     A               -             A               A
    1     A               B (staged)    A + B           A    A reached 2/3 of its life: stage B
    2     B               -             A + B           B    B promoted, the leaf re-issued by B
    3     B               -             B               B    A's leaves are gone: drop A

Leaf renewals happen at any step, signed by whichever CA signs at that step. Between two steps the
caller must inject ``ca-bundle.pem`` into the webhook configuration (``podium certs inject``) and
give every replica time to reload (`webhook.serve.tls.CertReloader`).

Nothing relies on the caller doing that in time. Two steps are *gated*, so that running ``rotate``
every minute (as a cron job may) is as safe as running it daily:

* step 2 (promote B) waits until the apiserver trusts B: the webhook configuration's caBundle,
  as read from the cluster (`ClusterTrust`), holds it — or, when the cluster is not read
  (``--offline``), until B has been staged for ``min_overlap`` (default 24 h);
* step 3 (drop A) waits until the serving certificate is signed by B (in the state directory and,
  when the cluster is read, in the Secret) *and* has been for ``min_overlap``, so every replica
  has long reloaded a leaf of B before the apiserver forgets A.

``force`` takes a gated step anyway; the plan then says what it risks (`Plan.warnings`).

The decision is `plan_rotation` (pure: state, ``now`` and what the cluster holds in, a `Plan`
out); `apply_rotation` carries it out in memory and `write_state` puts it on disk in an order
where every prefix is safe: a new CA reaches the bundle before a leaf it signs, each file is
replaced atomically.

The package, by concern (``from webhook import certs`` then ``certs.X`` for any of them):

* ``errors``: ``CertError`` and what derives from it;
* ``keys``: ``KeyPair``, PEM in and out, ``is_signed_by``;
* ``names``: subject alternative names (``parse_sans``, ``serving_names``);
* ``issuing``: ``issue_ca``, ``issue_leaf``, ``issue_serving``, ``reissue_serving``;
* ``renewal``: when a certificate is due (``needs_renewal``), ``summarize``;
* ``state``: the state directory (``load_state``, ``write_state``, ``issue`` a fresh one);
* ``rotation``: ``plan_rotation``, ``apply_rotation``, ``rotate``;
* ``cluster``: the Secret, the webhook's ``caBundle`` patch, ``ClusterCerts`` (what was read back);
* ``selfmanaged`` (imported by name, ``from webhook.certs import selfmanaged``): the same rotation
  kept in one Secret by podium's leader (``podium serve --certs self``, docs/certificates.md).

A floor of its own (``pyproject.toml``): it imports no other part of podium and no Kubernetes
client, so ``podium certs``, the test bed (its control plane, the operators' webhooks) and the
benchmarks all issue through it. Reading and applying against a cluster is
``webhook.ops.certs_cluster``.
"""

from __future__ import annotations

from webhook.certs.cluster import (
    FIELD_MANAGER,
    SECRET_NAME,
    SECRET_NAMESPACE,
    WEBHOOK_CONFIG,
    WEBHOOK_NAMES,
    ClusterCerts,
    ca_bundle_patch,
    secret_manifest,
)
from webhook.certs.errors import (
    CertError,
    CertStateError,
    ClusterReadError,
    InvalidSANError,
)
from webhook.certs.issuing import (
    CLOCK_SKEW,
    DEFAULT_CA_LIFETIME,
    DEFAULT_CA_NAME,
    DEFAULT_LEAF_LIFETIME,
    issue_ca,
    issue_leaf,
    issue_serving,
    issued_at,
    reissue_serving,
)
from webhook.certs.keys import (
    KeyPair,
    cert_to_pem,
    certs_from_pem,
    certs_to_pem,
    is_signed_by,
    key_from_pem,
    key_to_pem,
    load_pair,
)
from webhook.certs.names import (
    DEFAULT_CLUSTER_DOMAIN,
    parse_san,
    parse_sans,
    san_strings,
    serving_names,
)
from webhook.certs.renewal import (
    RENEW_AT,
    CertSummary,
    needs_renewal,
    renewal_time,
    summarize,
)
from webhook.certs.rotation import (
    DEFAULT_MIN_OVERLAP,
    Action,
    ClusterTrust,
    Hold,
    Plan,
    Rotation,
    apply_rotation,
    plan_rotation,
    rotate,
    rotate_state,
    staged_at,
)
from webhook.certs.state import (
    BUNDLE,
    CA_CERT,
    CA_KEY,
    CERT_MODE,
    KEY_MODE,
    LEAF_CERT,
    LEAF_KEY,
    NEXT_CA_CERT,
    NEXT_CA_KEY,
    CertState,
    atomic_write,
    issue,
    load_state,
    write_state,
)

__all__ = [
    "BUNDLE",
    "CA_CERT",
    "CA_KEY",
    "CERT_MODE",
    "CLOCK_SKEW",
    "DEFAULT_CA_LIFETIME",
    "DEFAULT_CA_NAME",
    "DEFAULT_CLUSTER_DOMAIN",
    "DEFAULT_LEAF_LIFETIME",
    "DEFAULT_MIN_OVERLAP",
    "FIELD_MANAGER",
    "KEY_MODE",
    "LEAF_CERT",
    "LEAF_KEY",
    "NEXT_CA_CERT",
    "NEXT_CA_KEY",
    "RENEW_AT",
    "SECRET_NAME",
    "SECRET_NAMESPACE",
    "WEBHOOK_CONFIG",
    "WEBHOOK_NAMES",
    "Action",
    "CertError",
    "CertState",
    "CertStateError",
    "CertSummary",
    "ClusterCerts",
    "ClusterReadError",
    "ClusterTrust",
    "Hold",
    "InvalidSANError",
    "KeyPair",
    "Plan",
    "Rotation",
    "apply_rotation",
    "atomic_write",
    "ca_bundle_patch",
    "cert_to_pem",
    "certs_from_pem",
    "certs_to_pem",
    "is_signed_by",
    "issue",
    "issue_ca",
    "issue_leaf",
    "issue_serving",
    "issued_at",
    "key_from_pem",
    "key_to_pem",
    "load_pair",
    "load_state",
    "needs_renewal",
    "parse_san",
    "parse_sans",
    "plan_rotation",
    "reissue_serving",
    "renewal_time",
    "rotate",
    "rotate_state",
    "san_strings",
    "secret_manifest",
    "serving_names",
    "staged_at",
    "summarize",
    "write_state",
]
