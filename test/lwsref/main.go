// Command lwsref prints reference data from upstream LeaderWorkerSet v0.9.0 (its own Go code)
// for lws-rollout's tests. It is test tooling only; the product is Rust. (v0.8.0's revisions
// come from the sibling module v08/.)
//
//	lwsref hash <lws-objects.json>   one JSON line per object: {"name", "key", "raw"}
//	lwsref matches <pairs.json>      one JSON line per {"lws": object, "raw": revision data}:
//	                                 {"name", "match"}: does v0.9.0 take the stored revision for
//	                                 the object's own (SetMatchesRevision: no rolling update)?
//	lwsref dsrevision <sets.json>    one JSON line per DisaggregatedSet: {"name", "revision"}
//	                                 (upstream's ComputeRevision of its roles)
//	lwsref dsplan <cases.json>       one JSON line per {"initial", "target", "config"}: the whole
//	                                 rolling update upstream's planner computes (ComputeAllSteps)
//	lwsref gotypes                   the Go JSON shape of every type reachable from an LWS spec
//	lwsref quantity <strings.json>   one JSON line per string: what resource.Quantity makes of it
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/lru"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	sigsjson "sigs.k8s.io/json"
	disaggv1 "sigs.k8s.io/lws/api/disaggregatedset/v1"
	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"
	dscontroller "sigs.k8s.io/lws/pkg/controllers/disaggregatedset"
	dsutils "sigs.k8s.io/lws/pkg/utils/disaggregatedset"
	revisionutils "sigs.k8s.io/lws/pkg/utils/revision"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: lwsref hash <file> | lwsref gotypes")
	}
	switch os.Args[1] {
	case "hash":
		if len(os.Args) != 3 {
			fail("usage: lwsref hash <file>")
		}
		hash(os.Args[2])
	case "matches":
		if len(os.Args) != 3 {
			fail("usage: lwsref matches <file>")
		}
		matches(os.Args[2])
	case "dsrevision":
		if len(os.Args) != 3 {
			fail("usage: lwsref dsrevision <file>")
		}
		dsrevision(os.Args[2])
	case "dsplan":
		if len(os.Args) != 3 {
			fail("usage: lwsref dsplan <file>")
		}
		dsplan(os.Args[2])
	case "gotypes":
		gotypes()
	case "quantity":
		if len(os.Args) != 3 {
			fail("usage: lwsref quantity <file>")
		}
		quantity(os.Args[2])
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "lwsref:", msg)
	os.Exit(2)
}

// hash decodes each object the way controller-runtime does (case-sensitive, ints preserved)
// and asks upstream's NewRevision for the ControllerRevision it would create.
func hash(path string) {
	data, err := os.ReadFile(path)
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

// matches asks upstream v0.9.0 whether a stored ControllerRevision (its data as another version
// or client wrote it) is the revision of the object's current template: equal bytes, or equal
// after re-serialising the stored template as v0.9.0 does (SetMatchesRevision).
func matches(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err.Error())
	}
	var pairs []struct {
		LWS json.RawMessage `json:"lws"`
		Raw string          `json:"raw"`
	}
	if err := json.Unmarshal(data, &pairs); err != nil {
		fail("input must be a JSON array of {lws, raw}: " + err.Error())
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = leaderworkerset.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	out := json.NewEncoder(os.Stdout)
	for i, pair := range pairs {
		var lws leaderworkerset.LeaderWorkerSet
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(pair.LWS, &lws); err != nil {
			fail(fmt.Sprintf("pair %d: %v", i, err))
		}
		proposed, err := revisionutils.NewRevision(context.Background(), c, &lws, "")
		if err != nil {
			fail(fmt.Sprintf("pair %d: %v", i, err))
		}
		existing := &appsv1.ControllerRevision{}
		existing.ResourceVersion = fmt.Sprint(i + 1)
		existing.Data.Raw = []byte(pair.Raw)
		match := revisionutils.EqualRevision(proposed, existing) ||
			revisionutils.SetMatchesRevision(&lws, proposed, existing, lru.New(4))
		_ = out.Encode(map[string]any{"name": lws.Name, "match": match})
	}
}

// dsrevision decodes each DisaggregatedSet as controller-runtime does and prints upstream's
// revision of its roles.
func dsrevision(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err.Error())
	}
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		fail("input must be a JSON array of DisaggregatedSet objects: " + err.Error())
	}
	out := json.NewEncoder(os.Stdout)
	for i, item := range items {
		var ds disaggv1.DisaggregatedSet
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(item, &ds); err != nil {
			fail(fmt.Sprintf("object %d: %v", i, err))
		}
		_ = out.Encode(map[string]string{"name": ds.Name, "revision": dsutils.ComputeRevision(ds.Spec.Roles)})
	}
}

// dsplan runs upstream's planner over whole rolling updates.
func dsplan(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err.Error())
	}
	var cases []struct {
		Initial []int `json:"initial"`
		Target  []int `json:"target"`
		Config  []struct {
			MaxSurge       int `json:"maxSurge"`
			MaxUnavailable int `json:"maxUnavailable"`
		} `json:"config"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		fail("input must be a JSON array of {initial, target, config}: " + err.Error())
	}
	out := json.NewEncoder(os.Stdout)
	for _, c := range cases {
		config := make([]dscontroller.RollingUpdateConfig, len(c.Config))
		for i, rc := range c.Config {
			config[i] = dscontroller.RollingUpdateConfig{MaxSurge: rc.MaxSurge, MaxUnavailable: rc.MaxUnavailable}
		}
		steps := dscontroller.ComputeAllSteps(c.Initial, c.Target, config)
		rows := make([]map[string][]int, len(steps))
		for i, s := range steps {
			rows[i] = map[string][]int{"old": s.Past, "new": s.New}
		}
		_ = out.Encode(rows)
	}
}

// quantity decodes each string of a JSON array as a quantity field of a Go object is decoded
// (Quantity.UnmarshalJSON) and prints what encoding the object writes for it (MarshalJSON), or
// the parse error: {"in", "out"} or {"in", "err"}.
func quantity(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err.Error())
	}
	var inputs []string
	if err := json.Unmarshal(data, &inputs); err != nil {
		fail("input must be a JSON array of strings: " + err.Error())
	}
	out := json.NewEncoder(os.Stdout)
	for _, in := range inputs {
		quoted, _ := json.Marshal(in)
		var q resource.Quantity
		if err := json.Unmarshal(quoted, &q); err != nil {
			_ = out.Encode(map[string]string{"in": in, "err": err.Error()})
			continue
		}
		encoded, err := json.Marshal(q)
		if err != nil {
			fail(err.Error())
		}
		var text string
		if err := json.Unmarshal(encoded, &text); err != nil {
			fail(err.Error())
		}
		_ = out.Encode(map[string]string{"in": in, "out": text})
	}
}

// Field is one JSON field of a Go struct, after inlining embedded structs.
type Field struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	OmitEmpty bool   `json:"omitempty,omitempty"`
	OmitZero  bool   `json:"omitzero,omitempty"`
}

// Types with their own MarshalJSON: described by what they print, not their fields.
var custom = map[string]string{
	"k8s.io/apimachinery/pkg/api/resource.Quantity":        "!quantity",
	"k8s.io/apimachinery/pkg/util/intstr.IntOrString":      "!intorstring",
	"k8s.io/apimachinery/pkg/apis/meta/v1.Time":            "!time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":       "!microtime",
	"k8s.io/apimachinery/pkg/apis/meta/v1.Duration":        "!duration",
	"k8s.io/apimachinery/pkg/runtime.RawExtension":         "!raw",
	"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":        "!raw",
}

// gotypes walks the Go types of an LWS spec and prints, for every struct, its JSON fields.
// Type strings: "*T", "[]T", "map[]T", "string", "int", "float", "bool", "bytes", a struct's
// "pkgpath.Name", or a custom marshaller's "!name".
func gotypes() {
	structs := map[string][]Field{}
	describe(reflect.TypeOf(leaderworkerset.LeaderWorkerSetSpec{}), structs)
	names := make([]string, 0, len(structs))
	for n := range structs {
		names = append(names, n)
	}
	sort.Strings(names)
	ordered := make([]map[string]any, 0, len(names))
	for _, n := range names {
		ordered = append(ordered, map[string]any{"type": n, "fields": structs[n]})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	_ = enc.Encode(ordered)
}

func typeName(t reflect.Type) string { return t.PkgPath() + "." + t.Name() }

func describe(t reflect.Type, structs map[string][]Field) string {
	if t.Name() != "" {
		if c, ok := custom[typeName(t)]; ok {
			return c
		}
	}
	switch t.Kind() {
	case reflect.Ptr:
		return "*" + describe(t.Elem(), structs)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		return "[]" + describe(t.Elem(), structs)
	case reflect.Map:
		return "map[]" + describe(t.Elem(), structs)
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "float"
	case reflect.Interface:
		return "any"
	case reflect.Struct:
		name := typeName(t)
		if _, seen := structs[name]; !seen {
			structs[name] = nil // mark before recursing: types can be recursive
			structs[name] = fields(t, structs)
		}
		return name
	}
	fail("unsupported kind " + t.Kind().String() + " in " + typeName(t))
	return ""
}

func fields(t reflect.Type, structs map[string][]Field) []Field {
	var out []Field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		parts := strings.Split(tag, ",")
		name := parts[0]
		inline := false
		for _, p := range parts[1:] {
			if p == "inline" {
				inline = true
			}
		}
		if (f.Anonymous && name == "") || inline {
			out = append(out, fields(f.Type, structs)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		field := Field{Name: name, Type: describe(f.Type, structs)}
		for _, p := range parts[1:] {
			switch p {
			case "omitempty":
				field.OmitEmpty = true
			case "omitzero":
				field.OmitZero = true
			}
		}
		out = append(out, field)
	}
	return out
}
