// The verdict oracle's engine built against Cilium v1.15, the last Cilium line without
// `enableDefaultDeny` (added in 1.16): it shows what an old agent does with podium's policy. The
// input, the output and the rest are in ../common/oracle.go, shared with ../oracle.
//
// v1.15 has no pkg/policy/lookup.go (LookupFlow came later), so the verdict is computed the way
// the 1.15 agent computes an endpoint's policy map: the policy repository resolves the selector
// policy of each identity (PolicyCache.UpdatePolicy, as endpoint regeneration does), DistillPolicy
// (SelectorPolicy.Consume) turns it into the map state the agent writes to the BPF policy map,
// and lookupMapState below looks a flow up in that map state in the precedence order of v1.15's
// datapath (bpf/lib/policy.h __policy_can_access): id/proto/port, ANY/proto/port, id/proto/ANY,
// ANY/proto/ANY, id/ANY/ANY, ANY/ANY/ANY, else drop; a matching deny entry drops.
//
// Entry points: CNP/CCNP .Parse() → Repository.AddList; NetworkPolicy → k8s.ParseNetworkPolicy.
// There is no policy-default-local-cluster in 1.15: policies select pods of any cluster.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cilium/cilium/pkg/defaults"
	"github.com/cilium/cilium/pkg/fqdn/re"
	"github.com/cilium/cilium/pkg/identity"
	"github.com/cilium/cilium/pkg/identity/cache"
	"github.com/cilium/cilium/pkg/k8s"
	v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slim_corev1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/api/core/v1"
	slim_networkingv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/api/networking/v1"
	slim_metav1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	k8sUtils "github.com/cilium/cilium/pkg/k8s/utils"
	"github.com/cilium/cilium/pkg/labels"
	"github.com/cilium/cilium/pkg/labelsfilter"
	"github.com/cilium/cilium/pkg/logging"
	"github.com/cilium/cilium/pkg/option"
	"github.com/cilium/cilium/pkg/policy"
	"github.com/cilium/cilium/pkg/policy/api"
	"github.com/cilium/cilium/pkg/policy/trafficdirection"
	testidentity "github.com/cilium/cilium/pkg/testutils/identity"
	"github.com/cilium/cilium/pkg/u8proto"
	"github.com/sirupsen/logrus"
	networkingv1 "k8s.io/api/networking/v1"
)

// owner is the endpoint a policy map is computed for (policy.PolicyOwner of v1.15).
type owner struct{ id uint64 }

func (o owner) GetID() uint64 { return o.id }

// LookupRedirectPortBuildLocked gives L7 rules a proxy port, so they count as allowed (no proxy runs).
func (o owner) LookupRedirectPortBuildLocked(bool, string, uint16) uint16 { return 65535 }
func (o owner) HasBPFPolicyMap() bool                                     { return true }
func (o owner) GetNamedPort(bool, string, uint8) uint16                   { return 0 }
func (o owner) PolicyDebug(logrus.Fields, string)                         {}

func run(stdin io.Reader, stdout io.Writer) error {
	in, prune, err := readInput(stdin)
	if err != nil {
		return err
	}
	logging.DefaultLogger.SetOutput(os.Stderr)
	logging.DefaultLogger.SetLevel(logrus.ErrorLevel)

	// Process-wide settings, as the agent has them in Kubernetes mode.
	option.Config.ClusterName = clusterName
	option.Config.AllowLocalhost = option.AllowLocalhostAlways
	policy.SetPolicyEnabled(option.DefaultEnforcement)
	// The "cluster" entity selects the local cluster's pods by cluster name; remote nodes have
	// their own identity by default (daemon/cmd/daemon.go).
	api.InitEntities(clusterName, false)
	// DNS rules (toFQDNs, rules.dns) compile their patterns through this cache (daemon/cmd/fqdn.go).
	if err := re.InitRegexCompileLRU(defaults.FQDNRegexCompileLRUSize); err != nil {
		return err
	}
	var prefixes []string
	if in.LabelPrefixes != nil {
		prefixes = *in.LabelPrefixes
	}
	if err := labelsfilter.ParseLabelPrefixCfg(prefixes, ""); err != nil {
		return fmt.Errorf("labelPrefixes: %w", err)
	}

	// Identities first: every one must be in the selector cache's initial identities.
	byName, idOut, idCache, err := identities(in.Identities)
	if err != nil {
		return err
	}
	repo := policy.NewPolicyRepository(testidentity.NewMockIdentityAllocator(idCache), idCache, nil, nil, api.NewPolicyMetricsNoop())
	repo.GetSelectorCache().SetLocalIdentityNotifier(testidentity.NewDummyIdentityNotifier())

	pruned := []string{}
	for i, raw := range in.Policies {
		rules, dropped, err := parsePolicy(raw, prune)
		if err != nil {
			return fmt.Errorf("policies[%d]: %w", i, err)
		}
		pruned = append(pruned, dropped...)
		repo.AddList(rules)
	}

	// Each identity's policy map, as endpoint regeneration computes it.
	maps := map[identity.NumericIdentity]policy.MapState{}
	for _, id := range byName {
		if _, done := maps[id.ID]; done {
			continue
		}
		pc := repo.GetPolicyCache()
		pc.LocalEndpointIdentityAdded(id)
		repo.Mutex.RLock()
		err := pc.UpdatePolicy(id)
		repo.Mutex.RUnlock()
		if err != nil {
			return fmt.Errorf("policy of identity %d: %w", id.ID, err)
		}
		maps[id.ID] = pc.Lookup(id).Consume(owner{uint64(id.ID)}).GetPolicyMap()
	}

	return writeOutput(stdout, idOut, pruned, in.Flows, func(f flowIn) (verdictOut, error) {
		return lookup(maps, byName, f)
	})
}

// identities builds each pod's identity the way the agent does (SanitizePodLabels, then the label
// filter); pods with the same identity-relevant labels share one numeric identity.
func identities(ins []identityIn) (map[string]*identity.Identity, []identityOut, cache.IdentityCache, error) {
	byName := map[string]*identity.Identity{}
	byLabels := map[string]*identity.Identity{}
	idmap := cache.IdentityCache{}
	out := []identityOut{}
	for i, in := range ins {
		if in.Name == "" || in.Namespace == "" {
			return nil, nil, nil, fmt.Errorf("identities[%d]: name and namespace are required", i)
		}
		if _, dup := byName[in.Name]; dup {
			return nil, nil, nil, fmt.Errorf("identities[%d]: duplicate name %q", i, in.Name)
		}
		nsLabels := map[string]string{"kubernetes.io/metadata.name": in.Namespace} // as the apiserver sets it
		for k, v := range in.NamespaceLabels {
			nsLabels[k] = v
		}
		sa := in.ServiceAccount
		if sa == "" {
			sa = "default" // what the ServiceAccount admission plugin fills in
		}
		podLabels := map[string]string{}
		for k, v := range in.Labels {
			podLabels[k] = v
		}
		ns := &slim_corev1.Namespace{ObjectMeta: slim_metav1.ObjectMeta{Name: in.Namespace, Labels: nsLabels}}
		sanitized := k8sUtils.SanitizePodLabels(podLabels, ns, sa, clusterName)
		relevant, _ := labelsfilter.Filter(labels.Map2Labels(sanitized, labels.LabelSourceK8s))
		array := relevant.LabelArray()
		key := array.String()
		id, seen := byLabels[key]
		if !seen {
			id = identity.NewIdentityFromLabelArray(identity.NumericIdentity(firstIdentity+len(byLabels)), array)
			byLabels[key] = id
			idmap[id.ID] = id.LabelArray
		}
		byName[in.Name] = id
		strs := []string{}
		for _, l := range array {
			strs = append(strs, l.String())
		}
		out = append(out, identityOut{Name: in.Name, ID: uint32(id.ID), Labels: strs})
	}
	return byName, out, idmap, nil
}

// parsePolicy turns one Kubernetes object into policy rules, as the v1.15 agent's watchers do.
func parsePolicy(raw json.RawMessage, prune bool) (api.Rules, []string, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, nil, err
	}
	what := fmt.Sprintf("%s %s/%s", head.Kind, head.Metadata.Namespace, head.Metadata.Name)
	if head.Metadata.Name == "" {
		return nil, nil, fmt.Errorf("%s: metadata.name is required", what)
	}
	var dropped []string
	check := func(v any) error {
		unknown, err := decode(raw, v)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if sel, err := selectorUnknownFields(raw); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		} else {
			unknown = append(unknown, sel...)
		}
		if len(unknown) > 0 && !prune {
			return fmt.Errorf("%s: %s", what, strings.Join(unknown, "; "))
		}
		for _, u := range unknown {
			dropped = append(dropped, what+": "+u)
		}
		return nil
	}
	var rules api.Rules
	var err error
	switch {
	case head.Kind == "CiliumNetworkPolicy" && head.APIVersion == "cilium.io/v2":
		if head.Metadata.Namespace == "" {
			return nil, nil, fmt.Errorf("%s: metadata.namespace is required", what)
		}
		var cnp v2.CiliumNetworkPolicy
		if err := check(&cnp); err != nil {
			return nil, nil, err
		}
		rules, err = cnp.Parse()
	case head.Kind == "CiliumClusterwideNetworkPolicy" && head.APIVersion == "cilium.io/v2":
		if head.Metadata.Namespace != "" {
			return nil, nil, fmt.Errorf("%s: a cluster-wide policy has no namespace", what)
		}
		var ccnp v2.CiliumClusterwideNetworkPolicy
		if err := check(&ccnp); err != nil {
			return nil, nil, err
		}
		rules, err = ccnp.Parse()
	case head.Kind == "NetworkPolicy" && head.APIVersion == "networking.k8s.io/v1":
		if head.Metadata.Namespace == "" {
			return nil, nil, fmt.Errorf("%s: metadata.namespace is required", what)
		}
		// Validate against the full API type, then hand the agent's slim type to the parser.
		var full networkingv1.NetworkPolicy
		if err := check(&full); err != nil {
			return nil, nil, err
		}
		var slim slim_networkingv1.NetworkPolicy
		if err := json.Unmarshal(raw, &slim); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		rules, err = k8s.ParseNetworkPolicy(&slim)
	default:
		return nil, nil, fmt.Errorf("%s: unsupported apiVersion/kind %s/%s", what, head.APIVersion, head.Kind)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	return rules, dropped, nil
}

func lookup(maps map[identity.NumericIdentity]policy.MapState, byName map[string]*identity.Identity, f flowIn) (verdictOut, error) {
	from, ok := byName[f.From]
	if !ok {
		return verdictOut{}, fmt.Errorf("unknown identity %q", f.From)
	}
	to, ok := byName[f.To]
	if !ok {
		return verdictOut{}, fmt.Errorf("unknown identity %q", f.To)
	}
	proto, ok := protos[f.Proto]
	if !ok {
		return verdictOut{}, fmt.Errorf("proto must be TCP, UDP or SCTP, not %q", f.Proto)
	}
	if f.Port < 1 || f.Port > 65535 {
		return verdictOut{}, fmt.Errorf("port %d out of range", f.Port)
	}
	v := verdictOut{
		From: f.From, To: f.To, Proto: f.Proto, Port: f.Port,
		Egress:  lookupMapState(maps[from.ID], to.ID, proto, uint16(f.Port), trafficdirection.Egress),
		Ingress: lookupMapState(maps[to.ID], from.ID, proto, uint16(f.Port), trafficdirection.Ingress),
	}
	switch {
	case v.Egress.Verdict == "allowed" && v.Ingress.Verdict == "allowed":
		v.Verdict, v.By = "allowed", "allowed"
	case v.Egress.By == "deny-rule" || v.Ingress.By == "deny-rule":
		v.Verdict, v.By = "denied", "deny-rule"
	default:
		v.Verdict, v.By = "denied", "default-deny"
	}
	return v, nil
}

// lookupMapState looks a packet up in an endpoint's policy map state in the order of v1.15's
// bpf/lib/policy.h __policy_can_access. The BPF map is an LPM map: a lookup with the remote
// identity returns the longest of id/proto/port, id/proto/ANY, id/ANY/ANY; the second lookup, with
// identity 0, the longest of ANY/proto/port, ANY/proto/ANY, ANY/ANY/ANY.
func lookupMapState(ms policy.MapState, remote identity.NumericIdentity, proto u8proto.U8proto, port uint16, dir trafficdirection.TrafficDirection) directionOut {
	get := func(id uint32, proto uint8, port uint16) (policy.MapStateEntry, bool) {
		return ms.Get(policy.Key{Identity: id, DestPort: port, Nexthdr: proto, TrafficDirection: dir.Uint8()})
	}
	type hit struct {
		entry policy.MapStateEntry
		level int // 0: port, 1: proto, 2: any
	}
	lpm := func(id uint32) *hit {
		if e, ok := get(id, uint8(proto), port); ok {
			return &hit{e, 0}
		}
		if e, ok := get(id, uint8(proto), 0); ok {
			return &hit{e, 1}
		}
		if e, ok := get(id, 0, 0); ok {
			return &hit{e, 2}
		}
		return nil
	}
	l3, l4 := lpm(uint32(remote)), lpm(0)
	var chosen *hit
	switch {
	case l3 != nil && l3.level == 0: // 1. id/proto/port
		chosen = l3
	case l4 != nil && l4.level == 0: // 2. ANY/proto/port
		chosen = l4
	case l3 != nil && l3.level == 1: // 3. id/proto/ANY
		chosen = l3
	case l4 != nil && l4.level == 1: // 4. ANY/proto/ANY
		chosen = l4
	case l3 != nil: // 5. id/ANY/ANY
		chosen = l3
	case l4 != nil: // 6. ANY/ANY/ANY
		chosen = l4
	}
	if chosen == nil {
		return directionOut{Verdict: "denied", By: "default-deny", Rules: []string{}}
	}
	rules := ruleNames(chosen.entry.DerivedFromRules)
	switch {
	case chosen.entry.IsDeny:
		return directionOut{Verdict: "denied", By: "deny-rule", Rules: rules}
	case len(rules) == 0:
		return directionOut{Verdict: "allowed", By: "default-allow", Rules: rules}
	}
	return directionOut{Verdict: "allowed", By: "allow-rule", Rules: rules}
}
