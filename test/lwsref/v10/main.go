// Command lwsref10 prints upstream LeaderWorkerSet v0.10.0's ControllerRevision for each LWS
// object (its own Go code), so the tests can check that our revision keys and data are
// byte-identical to v0.10.0's. Its output is checked in (vectors.v10.jsonl): the suite never
// builds a second LWS module. Test tooling only; the product is Rust.
//
//	lwsref10 hash <lws-objects.json>   one JSON line per object: {"name", "key", "raw"}
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
		fail("usage: lwsref10 hash <file>")
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
	fmt.Fprintln(os.Stderr, "lwsref10:", msg)
	os.Exit(2)
}
