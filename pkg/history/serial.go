package history

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrSerial is the error for a serial that is not one.
var ErrSerial = errors.New(`not a serial ("<ms>-<seq>")`)

var serialPattern = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

// CheckSerial reports whether s has a serial's form.
func CheckSerial(s string) error {
	if !serialPattern.MatchString(s) {
		return fmt.Errorf("%q: %w", s, ErrSerial)
	}
	return nil
}

// After reports whether serial a comes after serial b: stream ids
// "<ms>-<seq>", compared as two integers. A serial that is not one comes
// before any that is, so a malformed one never hides a real one.
func After(a, b string) bool {
	am, as, aok := split(a)
	bm, bs, bok := split(b)
	switch {
	case !aok || !bok:
		return aok && !bok
	case am != bm:
		return am > bm
	}
	return as > bs
}

func split(serial string) (ms, seq uint64, ok bool) {
	m, s, found := strings.Cut(serial, "-")
	if !found {
		return 0, 0, false
	}
	var err1, err2 error
	ms, err1 = strconv.ParseUint(m, 10, 64)
	seq, err2 = strconv.ParseUint(s, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}
