package apps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Registry looks apps up by id and by any of their keys. It serves one set
// of apps at a time, replaced whole by Replace (a reload): a lookup sees
// the old set or the new one, never a mix, and an *App it returned is never
// modified (a changed app is a new *App). The zero Registry holds no apps
// (Loaded is false): what a binary serves before its first load from a
// database. Safe for concurrent use.
type Registry struct {
	cur atomic.Pointer[set]

	mu      sync.Mutex
	changed chan struct{} // closed by the next Replace that changes something
}

type set struct {
	list  []*App
	byID  map[string]*App
	byKey map[string]*App
	// hashes holds each app's content hash, by id (hashApp).
	hashes map[string]string
	// warnings are the apps file's fields headcount ignores (Warnings).
	warnings []string
	version  Version
}

// Version identifies the set of apps a Registry serves.
type Version struct {
	// Hash is the first 12 hex digits of the SHA-256 of the apps' decoded
	// content: equal sets of apps, whatever their source's formatting,
	// have the same Hash.
	Hash string
	// LoadedAt is when the set was decoded.
	LoadedAt time.Time
}

func (r *Registry) load() *set {
	if r == nil {
		return nil
	}
	return r.cur.Load()
}

// ByID returns the app with this id, or nil (also on a nil registry).
func (r *Registry) ByID(id string) *App {
	if s := r.load(); s != nil {
		return s.byID[id]
	}
	return nil
}

// ByKey returns the app one of whose keys is key, or nil (also on a nil
// registry).
func (r *Registry) ByKey(key string) *App {
	if s := r.load(); s != nil {
		return s.byKey[key]
	}
	return nil
}

// All returns every app in the order of its source. The slice must not be
// modified.
func (r *Registry) All() []*App {
	if s := r.load(); s != nil {
		return s.list
	}
	return nil
}

// Loaded reports whether the registry holds a set of apps yet.
func (r *Registry) Loaded() bool { return r.load() != nil }

// Version returns the version of the set served; zero before one is.
func (r *Registry) Version() Version {
	if s := r.load(); s != nil {
		return s.version
	}
	return Version{}
}

// Warnings names each field of the apps' source that was ignored because
// headcount does not implement it, one sentence per field and app. The
// binaries log them at start and on each reload that changes them.
func (r *Registry) Warnings() []string {
	if s := r.load(); s != nil {
		return s.warnings
	}
	return nil
}

// publicSecrets are secrets anyone can read in headcount's own sources:
// DefaultSecret and the placeholder of the example apps files in deploy/.
var publicSecrets = []string{DefaultSecret, "replace-this-secret"}

// WithPublicSecret returns the ids of the apps one of whose secrets is one
// that ships with headcount (DefaultSecret or an example file's
// placeholder): whoever reaches a server holding such an app can sign its
// API requests and channel subscriptions.
func (r *Registry) WithPublicSecret() []string {
	var ids []string
	for _, a := range r.All() {
		if slices.ContainsFunc(a.keyPairs(), func(p KeyPair) bool { return slices.Contains(publicSecrets, p.Secret) }) {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// New builds a registry from apps, checking that each is complete and
// would work (validate: every source of apps, the apps file, a soketi
// config file, a database table and the environment, comes through here)
// and that ids and keys are unique across all apps.
func New(list []*App) (*Registry, error) {
	s := &set{byID: map[string]*App{}, byKey: map[string]*App{}, hashes: map[string]string{}}
	var errs []error
	for i, a := range list {
		if err := a.validate(); err != nil {
			errs = append(errs, fmt.Errorf("app %d: %w", i, err))
			continue
		}
		if s.byID[a.ID] != nil {
			errs = append(errs, fmt.Errorf("app %d: duplicate id %q", i, a.ID))
			continue
		}
		var dup []error
		seen := map[string]bool{}
		for _, p := range a.keyPairs() {
			if other := s.byKey[p.Key]; other != nil {
				dup = append(dup, fmt.Errorf("app %d: duplicate key %q (also a key of app %q)", i, p.Key, other.ID))
			} else if seen[p.Key] {
				dup = append(dup, fmt.Errorf("app %d: key %q listed twice", i, p.Key))
			}
			seen[p.Key] = true
		}
		if len(dup) > 0 {
			errs = append(errs, dup...)
			continue
		}
		s.byID[a.ID] = a
		for _, p := range a.keyPairs() {
			s.byKey[p.Key] = a
		}
		s.list = append(s.list, a)
	}
	if len(list) == 0 {
		errs = append(errs, errors.New("no apps defined"))
	}
	all := sha256.New()
	for _, a := range s.list {
		h := hashApp(a)
		s.hashes[a.ID] = h
		all.Write([]byte(h))
	}
	s.version = Version{Hash: hex.EncodeToString(all.Sum(nil)[:6]), LoadedAt: time.Now()}
	r := &Registry{}
	r.cur.Store(s)
	return r, errors.Join(errs...)
}

func hashApp(a *App) string {
	b, err := json.Marshal(a) //nolint:gosec // G117: hashed, never written out: a changed secret must change the hash
	if err != nil {
		panic(err) // an App is plain data: cannot happen
	}
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// Diff says which apps a Replace changed, by id, in the new set's order
// (Removed in the old set's).
type Diff struct {
	Added    []string
	Removed  []string
	Changed  []string // any field but the id, enabled or not
	Disabled []string // enabled before, disabled now (also in Changed)
}

// Empty reports whether nothing changed.
func (d Diff) Empty() bool { return len(d.Added)+len(d.Removed)+len(d.Changed) == 0 }

// Changed returns a channel closed when a Replace next changes the apps.
// A waiter takes it before reading the apps, so no change goes unseen.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// Replace makes the registry serve next's set of apps from now on and
// returns what changed, waking Changed's waiters if anything did. An app
// whose content did not change keeps its *App, so a holder can tell a
// change by comparing pointers. next must not be used afterwards.
func (r *Registry) Replace(next *Registry) Diff {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns, old := next.load(), r.cur.Load()
	var d Diff
	for i, a := range ns.list {
		was := old.lookup(a.ID)
		switch {
		case was == nil:
			d.Added = append(d.Added, a.ID)
		case old.hashes[a.ID] == ns.hashes[a.ID]:
			ns.list[i], ns.byID[a.ID] = was, was
			for _, p := range was.keyPairs() {
				ns.byKey[p.Key] = was
			}
		default:
			d.Changed = append(d.Changed, a.ID)
			if was.Enabled && !a.Enabled {
				d.Disabled = append(d.Disabled, a.ID)
			}
		}
	}
	if old != nil {
		for _, a := range old.list {
			if ns.byID[a.ID] == nil {
				d.Removed = append(d.Removed, a.ID)
			}
		}
	}
	r.cur.Store(ns)
	if !d.Empty() && r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	return d
}

func (s *set) lookup(id string) *App {
	if s == nil {
		return nil
	}
	return s.byID[id]
}
