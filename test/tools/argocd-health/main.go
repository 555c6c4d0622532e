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
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type result struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	// The same decoding Argo CD's cluster cache uses for live objects.
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(raw); err != nil {
		fail("stdin is not a Kubernetes object: %v", err)
	}
	// No resource.customizations: the built-in script is the one that runs.
	status, err := health.GetResourceHealth(obj, lua.ResourceHealthOverrides{})
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
