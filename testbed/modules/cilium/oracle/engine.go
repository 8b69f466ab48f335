// The verdict oracle's engine for the current Cilium line; the input, the output and the rest
// are in ../common/oracle.go.
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
	"strings"

	cmtypes "github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/identity"
	"github.com/cilium/cilium/pkg/identity/identitymanager"
	ipcachetypes "github.com/cilium/cilium/pkg/ipcache/types"
	"github.com/cilium/cilium/pkg/k8s"
	v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slim_networkingv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/api/networking/v1"
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
	networkingv1 "k8s.io/api/networking/v1"
)

// namespace is what SanitizePodLabels needs of a namespace.
type namespace struct {
	name   string
	labels map[string]string
}

func (n namespace) GetName() string              { return n.name }
func (n namespace) GetLabels() map[string]string { return n.labels }

func run(stdin io.Reader, stdout io.Writer) error {
	in, prune, err := readInput(stdin)
	if err != nil {
		return err
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

	return writeOutput(stdout, idOut, pruned, in.Flows, func(f flowIn) (verdictOut, error) {
		return lookup(logger, repo, idManager, byName, f)
	})
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
