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
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

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
