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
// This file is shared by both builds: the input and output, strict decoding and the rendering of
// verdicts. Each Cilium line's own engine.go (../oracle, ../oracle115) holds run, identities,
// parsePolicy and the lookup; testbed.build assembles this file and one engine.go with that line's
// go.mod and go.sum into one module.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"

	k8sConst "github.com/cilium/cilium/pkg/k8s/apis/cilium.io"
	slim_metav1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	"github.com/cilium/cilium/pkg/labels"
	"github.com/cilium/cilium/pkg/policy"
	"github.com/cilium/cilium/pkg/u8proto"
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

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "oracle: %v\n", err)
		os.Exit(1)
	}
}

// readInput reads the one JSON document on stdin, strictly; prune says whether policies' unknown
// fields are dropped (and reported) instead of refused.
func readInput(stdin io.Reader) (input, bool, error) {
	var in input
	data, err := io.ReadAll(stdin)
	if err != nil {
		return in, false, err
	}
	if err := decodeStrict(data, &in, "input"); err != nil {
		return in, false, err
	}
	switch in.UnknownFields {
	case "", "error":
		return in, false, nil
	case "prune":
		return in, true, nil
	default:
		return in, false, fmt.Errorf("unknownFields must be \"error\" or \"prune\", not %q", in.UnknownFields)
	}
}

// writeOutput judges every flow, in input order, and prints the one JSON document.
func writeOutput(stdout io.Writer, idOut []identityOut, pruned []string, flows []flowIn, judge func(flowIn) (verdictOut, error)) error {
	out := output{Cilium: ciliumVersion(), Identities: idOut, Pruned: pruned, Verdicts: []verdictOut{}}
	for i, f := range flows {
		v, err := judge(f)
		if err != nil {
			return fmt.Errorf("flows[%d] %s→%s %s/%d: %w", i, f.From, f.To, f.Proto, f.Port, err)
		}
		out.Verdicts = append(out.Verdicts, v)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", " ")
	return enc.Encode(out)
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
