package counts

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// MemberEdge is a presence member joining (first socket anywhere in the
// cluster) or leaving (last socket gone) a channel.
type MemberEdge struct {
	Channel string
	UserID  string
	// Added is true for a join, false for a leave.
	Added bool
	// UserInfo is the member's user_info (joins only; may be nil).
	UserInfo json.RawMessage
	// Version is the unit's (see Edges.Versions): a member list read with
	// MembersAt at a version at least this one holds the edge already.
	Version int64
}

// Edges reports what one atomic unit of one app changed cluster-wide: a
// flush of a node's changes, a node's removal, or the reaping of a dead
// node. Recorder calls RecorderOptions.OnFlushed with it from the flushing
// goroutine; Store.ReapNode returns it inside Reaped.
type Edges struct {
	App string
	// Channels holds the global subscription count, right after the unit,
	// of every channel whose count it changed (0: vacated).
	Channels map[string]int64
	// Versions holds the version of each count in Channels: the units of
	// an app number their counts in the order Redis ran them, whichever
	// process ran them, so of two counts of a channel the higher version is
	// the later. Edges merged from several units keep each channel's latest.
	Versions map[string]int64
	// Members lists the presence joins and leaves the unit caused (a reap
	// causes leaves only).
	Members []MemberEdge
}

// merge adds the edges of a later unit (or units) of the same app: each
// channel keeps its latest count, by version, and o's member edges follow
// e's.
func (e *Edges) merge(o Edges) {
	for ch, n := range o.Channels {
		if v, ok := e.Versions[ch]; ok && v > o.Versions[ch] {
			continue
		}
		if e.Channels == nil {
			e.Channels = make(map[string]int64, len(o.Channels))
			e.Versions = make(map[string]int64, len(o.Channels))
		}
		e.Channels[ch] = n
		e.Versions[ch] = o.Versions[ch]
	}
	e.Members = append(e.Members, o.Members...)
}

// Empty reports whether the unit changed nothing cluster-wide.
func (e Edges) Empty() bool { return len(e.Channels) == 0 && len(e.Members) == 0 }

// Vacated returns the channels the unit emptied.
func (e Edges) Vacated() []string {
	var out []string
	for ch, n := range e.Channels {
		if n == 0 {
			out = append(out, ch)
		}
	}
	return out
}

// Reaped reports what reaping (or removing) one node removed.
type Reaped struct {
	// Edges are the new global counts of every channel the node was
	// subscribed to, and the presence members whose last socket was on
	// the node.
	Edges
	// Fields is how many entries of the node's contribution were subtracted.
	Fields int
	// SinceSeen is how long before the reap, by the clock of the app's
	// Redis shard, the node was last seen: the reap latency.
	SinceSeen time.Duration
	// Exact is when the reap's first unit answered, by this process's
	// clock: from then every read leaves the node's counts out, however
	// long the rest of the reap takes.
	Exact time.Time
}

// scriptResult is what apply.lua and reap_slice.lua return.
type scriptResult struct {
	status   int64
	channels map[string]int64
	version  int64 // of every count in channels
	members  []MemberEdge
	left     int64 // reap_slice.lua only: fields left to reap
	// undeclared lists fields whose keys the call did not declare (status
	// statusUndeclared): nothing was written; retry declaring them.
	undeclared []string
}

// edges returns what the unit changed as Edges of app.
func (r scriptResult) edges(app string) Edges {
	e := Edges{App: app, Channels: r.channels, Members: r.members}
	if len(r.channels) > 0 {
		e.Versions = make(map[string]int64, len(r.channels))
		for ch := range r.channels {
			e.Versions[ch] = r.version
		}
	}
	return e
}

func parseResult(cmd *redis.Cmd) (scriptResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return scriptResult{}, err
	}
	var res scriptResult
	if len(v) == 0 {
		return res, errors.New("empty script result")
	}
	if res.status, err = toInt(v[0]); err != nil {
		return res, err
	}
	if res.status == statusUndeclared && len(v) > 1 {
		fields, _ := v[1].([]any)
		for _, f := range fields {
			if s, ok := f.(string); ok {
				res.undeclared = append(res.undeclared, s)
			}
		}
		return res, nil
	}
	if res.status < 0 || len(v) < 3 {
		return res, nil
	}
	chans, _ := v[1].([]any)
	if len(chans) > 0 {
		if res.version, err = toInt(chans[0]); err != nil {
			return res, err
		}
		chans = chans[1:]
	}
	for i := 0; i+1 < len(chans); i += 2 {
		ch, _ := chans[i].(string)
		n, err := toInt(chans[i+1])
		if err != nil {
			return res, err
		}
		if res.channels == nil {
			res.channels = map[string]int64{}
		}
		res.channels[ch] = n
	}
	edges, _ := v[2].([]any)
	for i := 0; i+3 < len(edges); i += 4 {
		added, err := toInt(edges[i])
		if err != nil {
			return res, err
		}
		e := MemberEdge{Added: added == 1, Version: res.version}
		e.Channel, _ = edges[i+1].(string)
		e.UserID, _ = edges[i+2].(string)
		if info, _ := edges[i+3].(string); info != "" {
			e.UserInfo = json.RawMessage(info)
		}
		res.members = append(res.members, e)
	}
	if len(v) > 3 {
		if res.left, err = toInt(v[3]); err != nil {
			return res, err
		}
	}
	return res, nil
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T in script result", v)
}
