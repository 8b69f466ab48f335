// Command oracle asks Cilium's own policy engine (github.com/cilium/cilium pkg/policy, the code
// the agent runs) for the verdicts of flows between labelled pods, offline: no agent, no kernel.
//
// It reads one JSON document on stdin:
//
//	{"policies":   [CiliumNetworkPolicy | CiliumClusterwideNetworkPolicy | NetworkPolicy objects],
//	 "identities": [{"name", "namespace", "labels", "namespaceLabels", "serviceAccount"}],
//	 "flows":      [{"from": name, "to": name, "proto": "TCP"|"UDP"|"SCTP", "port": N}],
//	 "labelPrefixes": null | ["k8s:podium.dev", ...],  // cilium-config `labels`; null: the default filter
//	 "unknownFields": "error" | "prune"}
//
// and prints one JSON document: the identity each pod got (its identity-relevant labels), the
// fields pruned (prune mode), and one verdict per flow, in input order. A flow is allowed when the
// sender's egress policy and the receiver's ingress policy both allow it; each direction says
// why: "default-allow" (the direction is not enforced), "allow-rule", "default-deny" (enforced,
// nothing allows it) or "deny-rule" (an explicit deny matched), and which policies decided.
//
// Policies are decoded strictly (unknown and duplicate fields are errors), the way the apiserver's
// strict field validation does; "prune" drops unknown fields instead and reports them, the way a
// structural CRD schema prunes fields it does not know (what an older Cilium's CRD does to a field
// that a newer Cilium added).
//
// Entry points follow the agent (pkg/policy/k8s) and cilium's own tests (pkg/k8s
// network_policy_test.go testNewPolicyRepository): CNP/CCNP .Parse → RulesToPolicyEntries →
// Repository.ReplaceByResource; NetworkPolicy → k8s.ParseNetworkPolicy; verdicts from
// policy.LookupFlow (pkg/policy/lookup.go).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"
	"strings"

	cmtypes "github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/identity"
	"github.com/cilium/cilium/pkg/identity/identitymanager"
	ipcachetypes "github.com/cilium/cilium/pkg/ipcache/types"
	"github.com/cilium/cilium/pkg/k8s"
	k8sConst "github.com/cilium/cilium/pkg/k8s/apis/cilium.io"
	v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slim_networkingv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/api/networking/v1"
	slim_metav1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	k8sUtils "github.com/cilium/cilium/pkg/k8s/utils"
	"github.com/cilium/cilium/pkg/labels"
	"github.com/cilium/cilium/pkg/labelsfilter"
	"github.com/cilium/cilium/pkg/option"
	"github.com/cilium/cilium/pkg/policy"
	policyapi "github.com/cilium/cilium/pkg/policy/api"
	policytypes "github.com/cilium/cilium/pkg/policy/types"
	policyutils "github.com/cilium/cilium/pkg/policy/utils"
	testidentity "github.com/cilium/cilium/pkg/testutils/identity"
	testpolicy "github.com/cilium/cilium/pkg/testutils/policy"
	"github.com/cilium/cilium/pkg/u8proto"
	networkingv1 "k8s.io/api/networking/v1"
	strictjson "sigs.k8s.io/json"
)

// clusterName is the agent's default cluster name (pkg/defaults ClusterName).
const clusterName = "default"

// firstIdentity is where the oracle starts numbering identities (above the reserved range).
const firstIdentity = 1000

type input struct {
	Policies      []json.RawMessage `json:"policies"`
	Identities    []identityIn      `json:"identities"`
	Flows         []flowIn          `json:"flows"`
	LabelPrefixes *[]string         `json:"labelPrefixes,omitempty"`
	UnknownFields string            `json:"unknownFields,omitempty"`
}

type identityIn struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	Labels          map[string]string `json:"labels"`
	NamespaceLabels map[string]string `json:"namespaceLabels"`
	ServiceAccount  string            `json:"serviceAccount,omitempty"`
}

type flowIn struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Proto string `json:"proto"`
	Port  int    `json:"port"`
}

type identityOut struct {
	Name   string   `json:"name"`
	ID     uint32   `json:"id"`
	Labels []string `json:"labels"`
}

type directionOut struct {
	Verdict string   `json:"verdict"`
	By      string   `json:"by"`
	Rules   []string `json:"rules"`
}

type verdictOut struct {
	From    string       `json:"from"`
	To      string       `json:"to"`
	Proto   string       `json:"proto"`
	Port    int          `json:"port"`
	Verdict string       `json:"verdict"`
	By      string       `json:"by"`
	Egress  directionOut `json:"egress"`
	Ingress directionOut `json:"ingress"`
}

type output struct {
	Cilium     string        `json:"cilium"`
	Identities []identityOut `json:"identities"`
	Pruned     []string      `json:"pruned"`
	Verdicts   []verdictOut  `json:"verdicts"`
}

// namespace is what SanitizePodLabels needs of a namespace.
type namespace struct {
	name   string
	labels map[string]string
}

func (n namespace) GetName() string              { return n.name }
func (n namespace) GetLabels() map[string]string { return n.labels }

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "oracle: %v\n", err)
		os.Exit(1)
	}
}

func run(stdin io.Reader, stdout io.Writer) error {
	data, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	var in input
	if err := decodeStrict(data, &in, "input"); err != nil {
		return err
	}
	prune := false
	switch in.UnknownFields {
	case "", "error":
	case "prune":
		prune = true
	default:
		return fmt.Errorf("unknownFields must be \"error\" or \"prune\", not %q", in.UnknownFields)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	// Process-wide settings, as the agent has them in Kubernetes mode.
	option.Config.ClusterName = clusterName
	option.Config.UnsafeDaemonConfigOption.AllowLocalhost = option.AllowLocalhostAlways
	policy.SetPolicyEnabled(option.DefaultEnforcement)
	// fromNodes/toNodes parse only with this set (pkg/policy/api rule_validation.go); it changes
	// nothing for pod identities.
	option.Config.EnableNodeSelectorLabels = true
	// The "cluster" entity selects the local cluster's pods by cluster name (pkg/policy/cell).
	policyapi.InitEntities(clusterName)
	var prefixes []string
	if in.LabelPrefixes != nil {
		prefixes = *in.LabelPrefixes
	}
	if err := labelsfilter.ParseLabelPrefixCfg(logger, prefixes, nil, ""); err != nil {
		return fmt.Errorf("labelPrefixes: %w", err)
	}

	// Identities first: every one must be in the repository's initial identity map.
	byName, idOut, idmap, err := identities(in.Identities)
	if err != nil {
		return err
	}
	idManager := identitymanager.NewIDManager(logger)
	repo := policy.NewPolicyRepository(logger, idmap, nil, nil, idManager, testpolicy.NewPolicyMetricsNoop())
	repo.GetSelectorCache().SetLocalIdentityNotifier(testidentity.NewDummyIdentityNotifier())
	idManager.Subscribe(testpolicy.SelectorCacheObserver{Cache: repo.GetSubjectSelectorCache()})

	pruned := []string{}
	policyCluster := cmtypes.LocalClusterNameForPolicies(cmtypes.DefaultPolicyConfig, clusterName)
	for i, raw := range in.Policies {
		entries, resource, dropped, err := parsePolicy(logger, raw, policyCluster, prune)
		if err != nil {
			return fmt.Errorf("policies[%d]: %w", i, err)
		}
		pruned = append(pruned, dropped...)
		repo.ReplaceByResource(entries, resource)
	}

	out := output{Cilium: ciliumVersion(), Identities: idOut, Pruned: pruned, Verdicts: []verdictOut{}}
	for i, f := range in.Flows {
		v, err := lookup(logger, repo, idManager, byName, f)
		if err != nil {
			return fmt.Errorf("flows[%d] %s→%s %s/%d: %w", i, f.From, f.To, f.Proto, f.Port, err)
		}
		out.Verdicts = append(out.Verdicts, v)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", " ")
	return enc.Encode(out)
}

// identities builds each pod's identity the way the agent does (SanitizePodLabels, then the label
// filter); pods with the same identity-relevant labels share one numeric identity.
func identities(ins []identityIn) (map[string]*identity.Identity, []identityOut, identity.IdentityMap, error) {
	byName := map[string]*identity.Identity{}
	byLabels := map[string]*identity.Identity{}
	idmap := identity.IdentityMap{}
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
		sanitized := k8sUtils.SanitizePodLabels(podLabels, namespace{in.Namespace, nsLabels}, sa, clusterName)
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

// parsePolicy turns one Kubernetes object into policy entries, as the agent's policy watcher does.
func parsePolicy(logger *slog.Logger, raw json.RawMessage, cluster string, prune bool) (policytypes.PolicyEntries, ipcachetypes.ResourceID, []string, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, "", nil, err
	}
	what := fmt.Sprintf("%s %s/%s", head.Kind, head.Metadata.Namespace, head.Metadata.Name)
	if head.Metadata.Name == "" {
		return nil, "", nil, fmt.Errorf("%s: metadata.name is required", what)
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
	switch {
	case head.Kind == "CiliumNetworkPolicy" && head.APIVersion == "cilium.io/v2":
		if head.Metadata.Namespace == "" {
			return nil, "", nil, fmt.Errorf("%s: metadata.namespace is required", what)
		}
		var cnp v2.CiliumNetworkPolicy
		if err := check(&cnp); err != nil {
			return nil, "", nil, err
		}
		rules, err := cnp.Parse(logger, cluster)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", what, err)
		}
		resource := ipcachetypes.NewResourceID(ipcachetypes.ResourceKindCNP, cnp.Namespace, cnp.Name)
		return policyutils.RulesToPolicyEntries(rules), resource, dropped, nil
	case head.Kind == "CiliumClusterwideNetworkPolicy" && head.APIVersion == "cilium.io/v2":
		if head.Metadata.Namespace != "" {
			return nil, "", nil, fmt.Errorf("%s: a cluster-wide policy has no namespace", what)
		}
		var ccnp v2.CiliumClusterwideNetworkPolicy
		if err := check(&ccnp); err != nil {
			return nil, "", nil, err
		}
		rules, err := ccnp.Parse(logger, cluster)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", what, err)
		}
		resource := ipcachetypes.NewResourceID(ipcachetypes.ResourceKindCCNP, "", ccnp.Name)
		return policyutils.RulesToPolicyEntries(rules), resource, dropped, nil
	case head.Kind == "NetworkPolicy" && head.APIVersion == "networking.k8s.io/v1":
		if head.Metadata.Namespace == "" {
			return nil, "", nil, fmt.Errorf("%s: metadata.namespace is required", what)
		}
		// Validate against the full API type, then hand the agent's slim type to the parser.
		var full networkingv1.NetworkPolicy
		if err := check(&full); err != nil {
			return nil, "", nil, err
		}
		var slim slim_networkingv1.NetworkPolicy
		if err := json.Unmarshal(raw, &slim); err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", what, err)
		}
		entries, err := k8s.ParseNetworkPolicy(logger, cluster, &slim)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", what, err)
		}
		resource := ipcachetypes.NewResourceID(ipcachetypes.ResourceKindNetpol, slim.Namespace, slim.Name)
		return entries, resource, dropped, nil
	}
	return nil, "", nil, fmt.Errorf("%s: unsupported apiVersion/kind %s/%s", what, head.APIVersion, head.Kind)
}

// decode decodes case-sensitively into v and returns the strict errors (unknown or duplicate fields,
// with their paths) separately from fatal ones.
func decode(data []byte, v any) ([]string, error) {
	strict, err := strictjson.UnmarshalStrict(data, v)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, e := range strict {
		out = append(out, e.Error())
	}
	return out, nil
}

func decodeStrict(data []byte, v any, what string) error {
	unknown, err := decode(data, v)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s: %s", what, strings.Join(unknown, "; "))
	}
	return nil
}

// selectorKeys hold Cilium endpoint selectors. api.EndpointSelector decodes itself with the
// standard library (which ignores unknown fields), so a misspelled "matchLabel" there would select
// every pod: these are checked on their own, against the label selector type.
var selectorKeys = map[string]bool{
	"endpointSelector": true, "nodeSelector": true,
	"fromEndpoints": true, "toEndpoints": true, "fromRequires": true, "toRequires": true,
	"fromNodes": true, "toNodes": true,
}

func selectorUnknownFields(raw []byte) ([]string, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	out := []string{}
	var walk func(path string, v any) error
	check := func(path string, sel any) error {
		b, err := json.Marshal(sel)
		if err != nil {
			return err
		}
		var ls slim_metav1.LabelSelector
		unknown, err := decode(b, &ls)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, u := range unknown {
			out = append(out, fmt.Sprintf("%s: %s", path, u))
		}
		return nil
	}
	walk = func(path string, v any) error {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				p := strings.TrimPrefix(path+"."+k, ".")
				if selectorKeys[k] {
					switch s := t[k].(type) {
					case map[string]any:
						if err := check(p, s); err != nil {
							return err
						}
					case []any:
						for i, e := range s {
							if err := check(fmt.Sprintf("%s[%d]", p, i), e); err != nil {
								return err
							}
						}
					}
					continue
				}
				if err := walk(p, t[k]); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range t {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("", doc); err != nil {
		return nil, err
	}
	return out, nil
}

var protos = map[string]u8proto.U8proto{"TCP": u8proto.TCP, "UDP": u8proto.UDP, "SCTP": u8proto.SCTP}

func lookup(logger *slog.Logger, repo *policy.Repository, idm identitymanager.IDManager, byName map[string]*identity.Identity, f flowIn) (verdictOut, error) {
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
	flow := policytypes.Flow{From: from, To: to, Proto: proto, Dport: uint16(f.Port)}
	result, egress, ingress, err := policy.LookupFlow(logger, repo, idm, flow)
	if err != nil {
		return verdictOut{}, err
	}
	v := verdictOut{
		From: f.From, To: f.To, Proto: f.Proto, Port: f.Port,
		Egress:  direction(result.Egress, egress),
		Ingress: direction(result.Ingress, ingress),
	}
	switch {
	case result.Allowed():
		v.Verdict, v.By = "allowed", "allowed"
	case v.Egress.By == "deny-rule" || v.Ingress.By == "deny-rule":
		v.Verdict, v.By = "denied", "deny-rule"
	default:
		v.Verdict, v.By = "denied", "default-deny"
	}
	return v, nil
}

// direction says why one direction decided as it did: a map-state entry derived from rules, or
// none (the lookup's default).
func direction(d policytypes.Decision, meta policy.RuleMeta) directionOut {
	rules := ruleNames(meta.LabelArray())
	out := directionOut{Verdict: d.String(), Rules: rules}
	switch {
	case d == policytypes.DecisionAllowed && len(rules) == 0:
		out.By = "default-allow"
	case d == policytypes.DecisionAllowed:
		out.By = "allow-rule"
	case len(rules) == 0:
		out.By = "default-deny"
	default:
		out.By = "deny-rule"
	}
	return out
}

// ruleNames renders the policies behind an entry as Kind/namespace/name (Kind//name when
// cluster-wide). Entries the agent adds itself (reserved:io.cilium.policy.derived-from, e.g.
// allow-any-ingress for a direction nothing enforces) are no policy and are left out.
func ruleNames(list labels.LabelArrayList) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, la := range list {
		if agentOwn(la) {
			continue
		}
		kind := k8sLabel(la, k8sConst.PolicyLabelDerivedFrom)
		ns := k8sLabel(la, k8sConst.PolicyLabelNamespace)
		name := k8sLabel(la, k8sConst.PolicyLabelName)
		s := fmt.Sprintf("%s/%s/%s", kind, ns, name)
		if kind == "" && name == "" {
			s = la.String()
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// k8sLabel is the value of the k8s-source label key in la, or "".
func k8sLabel(la labels.LabelArray, key string) string {
	for _, l := range la {
		if l.Source == labels.LabelSourceK8s && l.Key == key {
			return l.Value
		}
	}
	return ""
}

// agentOwn says whether a rule's labels are one of the agent's own (reserved) derived-from labels.
func agentOwn(la labels.LabelArray) bool {
	for _, l := range la {
		if l.Source == labels.LabelSourceReserved && l.Key == policy.LabelKeyPolicyDerivedFrom {
			return true
		}
	}
	return false
}

// ciliumVersion is the version of github.com/cilium/cilium this binary was built with.
func ciliumVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/cilium/cilium" {
				return dep.Version
			}
		}
	}
	return "unknown"
}
