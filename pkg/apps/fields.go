package apps

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// aliases are other spellings of fields, by canonical name: soketi's
// database app managers' column names, which canonical does not reduce to
// the camelCase name.
var aliases = map[string]string{
	"appid":                  "id",
	"appkey":                 "key",
	"appsecret":              "secret",
	"maxbackendeventspersec": "maxbackendeventspersecond",
	"maxclienteventspersec":  "maxclienteventspersecond",
	"maxreadreqpersec":       "maxreadrequestspersecond",
}

// soketiUnsupported are soketi's app settings (canonical, nested ones by
// their parent's name) that headcount does not implement. They are
// ignored with a warning so that a soketi apps file loads unchanged; any
// other unknown field is refused. A nested name a struct field of this
// package already takes is not looked up here, so implementing one only
// needs the field.
var soketiUnsupported = map[string]string{
	"maxeventnamelength":         "maxEventNameLength",
	"webhooks.lambdafunction":    "lambda_function",
	"webhooks.lambda":            "lambda",
	"webhooks.headers":           "headers",
	"webhooks.filter":            "filter",
	"hasclienteventwebhooks":     "hasClientEventWebhooks",
	"haschanneloccupiedwebhooks": "hasChannelOccupiedWebhooks",
	"haschannelvacatedwebhooks":  "hasChannelVacatedWebhooks",
	"hasmemberaddedwebhooks":     "hasMemberAddedWebhooks",
	"hasmemberremovedwebhooks":   "hasMemberRemovedWebhooks",
	"hascachemissedwebhooks":     "hasCacheMissedWebhooks",
}

// appFields keys an app object's fields by canonical name, aliases
// resolved. A field given twice under different spellings is an error:
// which one won would depend on map order.
// spelled maps each canonical name to the spelling the file used.
func appFields(fields map[string]json.RawMessage) (f map[string]json.RawMessage, spelled map[string]string, errs []error) {
	f = make(map[string]json.RawMessage, len(fields))
	spelled = make(map[string]string, len(fields))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !yield(k) {
				return
			}
		}
	}) {
		c := canonical(k)
		if to, ok := aliases[c]; ok {
			c = to
		}
		if prev, dup := spelled[c]; dup {
			errs = append(errs, fmt.Errorf("field %q given twice, also as %q", k, prev))
			continue
		}
		f[c], spelled[c] = fields[k], k
	}
	return f, spelled, errs
}

// leftoverFields sorts the fields decodeApp did not use (and the nested
// ones normalizeKeys skipped, by path) into warnings, for soketi's
// settings headcount does not implement, and an error naming the others.
func leftoverFields(app string, f map[string]json.RawMessage, spelled map[string]string, used map[string]bool, nested []string) ([]string, error) {
	var warnings []string
	var unknown []string
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for c := range f {
			if !used[c] && !yield(c) {
				return
			}
		}
	}) {
		if name, ok := soketiUnsupported[c]; ok {
			warnings = append(warnings, fmt.Sprintf("app %q: field %s is a soketi setting headcount does not implement; it is ignored", app, name))
			continue
		}
		unknown = append(unknown, strconv.Quote(spelled[c]))
	}
	for _, path := range nested {
		warnings = append(warnings, fmt.Sprintf("app %q: field %s is a soketi setting headcount does not implement; it is ignored", app, path))
	}
	if len(unknown) > 0 {
		return warnings, fmt.Errorf("unknown field(s) %s (neither a headcount nor a soketi setting; names match without regard to case and underscores)",
			strings.Join(unknown, ", "))
	}
	return warnings, nil
}

// normalizeKeys rewrites the object keys of v, a value to be decoded into
// a t, to the spelling of t's json tags, matched as canonical matches, so
// nested fields are as forgiving as top-level ones (encoding/json alone
// ignores case but not underscores, and drops unknown keys silently). It
// recurses through structs, slices and pointers, not maps (their keys are
// data), nor into a type that decodes itself (json.Unmarshaler, such as
// Webhook), which checks its own fields. A key t does not have is dropped: soketi's unsupported ones are
// returned by path for a warning, others are an error. path names v in
// messages.
func normalizeKeys(v json.RawMessage, t reflect.Type, path string) (json.RawMessage, []string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return v, nil, nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(v, &items) != nil {
			return v, nil, nil // json.Unmarshal reports the type error
		}
		var skipped []string
		var errs []error
		for i, item := range items {
			n, s, err := normalizeKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			items[i], skipped, errs = n, append(skipped, s...), append(errs, err)
		}
		out, err := json.Marshal(items)
		if err != nil {
			return v, skipped, err
		}
		return out, skipped, errors.Join(errs...)
	case reflect.Struct:
	default:
		return v, nil, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		return v, nil, nil
	}
	out := make(map[string]json.RawMessage, len(obj))
	var skipped []string
	var errs []error
	parent := canonical(strings.Split(path, "[")[0])
	for k, item := range obj {
		f, ok := fieldByCanonical(t, canonical(k))
		if !ok {
			if _, known := soketiUnsupported[parent+"."+canonical(k)]; known {
				skipped = append(skipped, path+"."+k)
			} else {
				errs = append(errs, fmt.Errorf("field %s.%s: unknown (neither a headcount nor a soketi setting)", path, k))
			}
			continue
		}
		name := jsonName(f)
		if _, dup := out[name]; dup {
			errs = append(errs, fmt.Errorf("field %s.%s given twice under different spellings", path, k))
			continue
		}
		n, s, err := normalizeKeys(item, f.Type, path+"."+name)
		out[name], skipped, errs = n, append(skipped, s...), append(errs, err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return v, skipped, err
	}
	slices.Sort(skipped)
	return b, skipped, errors.Join(errs...)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// fieldByCanonical finds t's exported field whose json name is c when
// canonicalized.
func fieldByCanonical(t reflect.Type, c string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && jsonName(f) != "-" && canonical(jsonName(f)) == c {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// jsonName is the key encoding/json uses for f.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}
