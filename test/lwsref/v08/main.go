// Command lwsref08 prints upstream LeaderWorkerSet v0.8.0's ControllerRevision for each LWS
// object (its own Go code): what a cluster run by v0.8.0 holds, so the tests can check that
// our controller (which hashes as v0.9.0 does) recognises every such revision as its own.
// Test tooling only; the product is Rust.
//
//	lwsref08 hash <lws-objects.json>   one JSON line per object: {"name", "key", "raw"}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	sigsjson "sigs.k8s.io/json"
	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"
	revisionutils "sigs.k8s.io/lws/pkg/utils/revision"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "hash" {
		fail("usage: lwsref08 hash <file>")
	}
	data, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail(err.Error())
	}
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		fail("input must be a JSON array of LeaderWorkerSet objects: " + err.Error())
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = leaderworkerset.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	out := json.NewEncoder(os.Stdout)
	for i, item := range items {
		var lws leaderworkerset.LeaderWorkerSet
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(item, &lws); err != nil {
			fail(fmt.Sprintf("object %d: %v", i, err))
		}
		cr, err := revisionutils.NewRevision(context.Background(), c, &lws, "")
		if err != nil {
			fail(fmt.Sprintf("object %d: %v", i, err))
		}
		_ = out.Encode(map[string]string{
			"name": lws.Name,
			"key":  revisionutils.GetRevisionKey(cr),
			"raw":  string(cr.Data.Raw),
		})
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "lwsref08:", msg)
	os.Exit(2)
}
