// Command argocd-health reads one Kubernetes object (JSON) on stdin and prints Argo CD's
// health assessment of it as {"status": "...", "message": "..."} on stdout.
//
// It calls exactly what Argo CD's application controller calls for every live resource
// (controller/health.go: health.GetResourceHealth with lua.ResourceHealthOverrides): with no
// overrides configured, util/lua looks up the built-in script for the object's group/kind
// (for rollouts.kruise.io/Rollout: resource_customizations/rollouts.kruise.io/Rollout/health.lua,
// embedded in Argo CD), converts the object to a Lua table and runs the script in gopher-lua.
//
// A script error is what Argo CD shows as health "Unknown" with the error as message; it is
// printed that way too, with "error" set, and the exit code stays 0 so callers can assert on
// it. An object Argo CD has no health check for prints status "" (Argo CD skips it).
//
//	argocd-health [--argocd-cm FILE] < object.json
//
// With --argocd-cm, FILE is an argocd-cm ConfigMap (YAML or JSON) as a user applies it: Argo
// CD's own settings manager reads its resource customizations (e.g.
// resource.customizations.health.<group>_<kind>) exactly as the application controller does,
// and those overrides take part in the health check.
//
// Resource actions, as Argo CD's API server runs them (server/application RunResourceAction):
//
//	argocd-health --argocd-cm FILE --actions < object.json
//
// prints the actions Argo CD offers for the object (its discovery scripts: the argocd-cm's and
// the built-in ones), [{"name": ..., "disabled": ...}], sorted by name; and
//
//	argocd-health --argocd-cm FILE --action NAME < object.json
//
// runs action NAME's Lua on the object and prints the patches Argo CD would send:
// {"status": <merge patch of the status subresource or null>, "object": <merge patch of the
// rest or null>} — the server's merge patch between the live and the returned object, split
// as its patchResource splits it (the status part goes to the status subresource when the CRD
// has one). A script error exits 1 with the error on stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	jsonpatch "github.com/evanphx/json-patch"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

// overrides reads the resource overrides of an argocd-cm ConfigMap through Argo CD's settings
// manager (here on a fake clientset holding just that ConfigMap).
func overrides(path string) (lua.ResourceHealthOverrides, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(raw, cm); err != nil {
		return nil, fmt.Errorf("%s is not a ConfigMap: %w", path, err)
	}
	if cm.Name != "argocd-cm" {
		return nil, fmt.Errorf("%s: the ConfigMap must be named argocd-cm, not %q", path, cm.Name)
	}
	cm.Namespace = "argocd"
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["app.kubernetes.io/part-of"] = "argocd"
	mgr := settings.NewSettingsManager(context.Background(), fake.NewClientset(cm), "argocd")
	got, err := mgr.GetResourceOverrides()
	if err != nil {
		return nil, err
	}
	return lua.ResourceHealthOverrides(got), nil
}

type result struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

func main() {
	cmPath := flag.String("argocd-cm", "", "an argocd-cm ConfigMap whose resource customizations apply")
	listActions := flag.Bool("actions", false, "print the resource actions Argo CD offers for the object")
	actionName := flag.String("action", "", "run this resource action and print its patches")
	flag.Parse()
	custom := lua.ResourceHealthOverrides{}
	if *cmPath != "" {
		var err error
		if custom, err = overrides(*cmPath); err != nil {
			fail("reading %s: %v", *cmPath, err)
		}
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	// The same decoding Argo CD's cluster cache uses for live objects.
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(raw); err != nil {
		fail("stdin is not a Kubernetes object: %v", err)
	}
	if *listActions {
		runDiscovery(obj, custom)
		return
	}
	if *actionName != "" {
		runAction(obj, raw, custom, *actionName)
		return
	}
	// Without --argocd-cm, no resource.customizations: the built-in script is the one that runs.
	status, err := health.GetResourceHealth(obj, custom)
	out := result{}
	if status != nil {
		out.Status = string(status.Status)
		out.Message = status.Message
	}
	if err != nil {
		out.Status = string(health.HealthStatusUnknown)
		out.Error = err.Error()
		if out.Message == "" {
			out.Message = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("writing stdout: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "argocd-health: "+format+"\n", args...)
	os.Exit(2)
}

// runDiscovery prints the actions Argo CD's API server lists for the object
// (ListResourceActions: GetResourceActionDiscovery, then ExecuteResourceActionDiscovery).
func runDiscovery(obj *unstructured.Unstructured, custom lua.ResourceHealthOverrides) {
	vm := lua.VM{ResourceOverrides: custom}
	scripts, err := vm.GetResourceActionDiscovery(obj)
	if err != nil {
		fail("action discovery: %v", err)
	}
	actions, err := vm.ExecuteResourceActionDiscovery(obj, scripts)
	if err != nil {
		fail("action discovery: %v", err)
	}
	type listed struct {
		Name     string `json:"name"`
		Disabled bool   `json:"disabled"`
	}
	out := []listed{}
	for _, a := range actions {
		out = append(out, listed{Name: a.Name, Disabled: a.Disabled})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("writing stdout: %v", err)
	}
}

// runAction runs one action as Argo CD's API server does (RunResourceActionV2: GetResourceAction,
// ExecuteResourceAction, then patchResource's merge patch and its status split) and prints the
// patches instead of sending them.
func runAction(obj *unstructured.Unstructured, live []byte, custom lua.ResourceHealthOverrides, name string) {
	vm := lua.VM{ResourceOverrides: custom}
	action, err := vm.GetResourceAction(obj, name)
	if err != nil {
		fail("action %s: %v", name, err)
	}
	impacted, err := vm.ExecuteResourceAction(obj.DeepCopy(), action.ActionLua, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "argocd-health: action %s: %v\n", name, err)
		os.Exit(1)
	}
	if len(impacted) != 1 || impacted[0].K8SOperation != lua.PatchOperation {
		fail("action %s: expected one patched object, got %d impacted resources", name, len(impacted))
	}
	// The server marshals the live object it read and the returned one, as here.
	liveObj := &unstructured.Unstructured{}
	if err := liveObj.UnmarshalJSON(live); err != nil {
		fail("stdin: %v", err)
	}
	liveBytes, err := json.Marshal(liveObj)
	if err != nil {
		fail("marshal: %v", err)
	}
	newBytes, err := json.Marshal(impacted[0].UnstructuredObj)
	if err != nil {
		fail("marshal: %v", err)
	}
	diff, err := jsonpatch.CreateMergePatch(liveBytes, newBytes)
	if err != nil {
		fail("merge patch: %v", err)
	}
	out := map[string]any{"status": nil, "object": nil}
	if string(diff) != "{}" {
		var patch map[string]any
		if err := json.Unmarshal(diff, &patch); err != nil {
			fail("merge patch: %v", err)
		}
		if status, ok := patch["status"]; ok {
			out["status"] = map[string]any{"status": status}
			delete(patch, "status")
		}
		if len(patch) > 0 {
			out["object"] = patch
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("writing stdout: %v", err)
	}
}
