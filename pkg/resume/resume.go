package resume

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/luascript"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// saveScript runs in a pipeline: always by EVAL (a few hundred bytes, at
// most once a second per id), so a Redis that lost its script cache never
// answers NOSCRIPT for a save that would then be missing.
var saveScript = luascript.New(scriptFiles, "scripts/save.lua", luascript.StreamIDs)

// Store reads and writes the resume state. Its methods are safe for
// concurrent use.
type Store struct {
	keys
	rdb redis.UniversalClient
}

// New returns a Store on rdb, its keys in ks.
func New(rdb redis.UniversalClient, ks keyspace.Space) *Store {
	return &Store{keys: keys{ks}, rdb: rdb}
}

// Load returns the serials saved for (app, id): channel -> serial; empty
// when there are none.
func (s *Store) Load(ctx context.Context, app, id string) (map[string]string, error) {
	m, err := s.rdb.HGetAll(ctx, s.state(app, id)).Result()
	if err != nil {
		return nil, fmt.Errorf("read the resume state of id %q of app %q: %w", id, app, err)
	}
	return m, nil
}

// Save is what one id's page acknowledged since its last save.
type Save struct {
	ID string
	// Serials: channel -> serial of the last event acknowledged.
	Serials map[string]string
	// TTL is how long the state is kept: the app's longest history window.
	TTL time.Duration
}

// Save writes saves of app in one round trip; each channel's serial only
// moves forward.
func (s *Store) Save(ctx context.Context, app string, saves []Save) error {
	if len(saves) == 0 {
		return nil
	}
	p := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, 0, len(saves))
	for _, sv := range saves {
		if len(sv.Serials) == 0 {
			continue
		}
		args := make([]any, 0, 1+2*len(sv.Serials))
		args = append(args, max(sv.TTL, time.Second).Milliseconds())
		for ch, serial := range sv.Serials {
			args = append(args, ch, serial)
		}
		cmds = append(cmds, p.Eval(ctx, saveScript.Source(), []string{s.state(app, sv.ID)}, args...))
	}
	if len(cmds) == 0 {
		return nil
	}
	_, _ = p.Exec(ctx)
	var errs []error
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("save the resume state of app %q: %w", app, err)
	}
	return nil
}
