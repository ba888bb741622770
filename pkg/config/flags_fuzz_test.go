package config

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// FuzzParseArgs: any command line is parsed without a panic, in a bounded
// number of steps (parse goes on past bad flags), and what the cleaner
// leaves to a subcommand is taken from its arguments, in their order.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		"", "audit", "audit\x00--repair", "--redis\x00redis://x:1\x00audit\x00--repair",
		"audit\x00--redis\x00localhost:6379\x00--repair", "--drain=abc\x00--bogus\x00x\x00--heartbeat=-1s",
		"audit\x00--\x00--dead-after\x00x", "--version", "-h", "--redis-tls=maybe\x00--redis", "---x\x00-=y\x00--",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		if line == "" {
			args = nil
		}
		_, rest, err := ParseCleaner(args, env(nil), io.Discard)
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, ErrVersion) {
			return
		}
		i := 0
		for _, w := range rest {
			for i < len(args) && args[i] != w {
				i++
			}
			if i == len(args) {
				t.Fatalf("rest %q is not a subsequence of the arguments %q", rest, args)
			}
			i++
		}
		_, _ = ParseWSNode(args, env(nil), io.Discard)
	})
}
