package protocol_test

import (
	"testing"

	"github.com/headcount/headcount/pkg/protocol"
)

// TestChannelKinds pins every rule that depends on a channel's kind, the
// way each part of headcount asks it.
func TestChannelKinds(t *testing.T) {
	for _, tc := range []struct {
		name                                                    string
		kind                                                    protocol.Kind
		counted, announces, members, encrypted, auth, clientEvs bool
		cache                                                   bool
	}{
		{"room", protocol.KindPublic, true, true, false, false, false, false, false},
		{"cache-room", protocol.KindPublic, true, true, false, false, false, false, true},
		{"private-room", protocol.KindPrivate, true, true, false, false, true, true, false},
		{"private-cache-room", protocol.KindPrivate, true, true, false, false, true, true, true},
		{"private-encrypted-room", protocol.KindEncrypted, true, true, false, true, true, false, false},
		{"private-encrypted-cache-room", protocol.KindEncrypted, true, true, false, true, true, false, true},
		{"presence-room", protocol.KindPresence, true, false, true, false, true, true, false},
		{"presence-cache-room", protocol.KindPresence, true, false, true, false, true, true, true},
		{"#server-to-user-42", protocol.KindUser, false, false, false, false, false, false, false},
		{"privatechannel", protocol.KindPublic, true, true, false, false, false, false, false},
		{"presencecache-x", protocol.KindPublic, true, true, false, false, false, false, false},
	} {
		k := protocol.ChannelKind(tc.name)
		got := []bool{k.Counted(), k.AnnouncesCounts(), k.HasMembers(), k.Encrypted(), k.NeedsAuth(), k.AllowsClientEvents(), protocol.IsCacheChannel(tc.name)}
		want := []bool{tc.counted, tc.announces, tc.members, tc.encrypted, tc.auth, tc.clientEvs, tc.cache}
		if k != tc.kind {
			t.Errorf("%s: kind %v, want %v", tc.name, k, tc.kind)
		}
		for i, what := range []string{"Counted", "AnnouncesCounts", "HasMembers", "Encrypted", "NeedsAuth", "AllowsClientEvents", "IsCacheChannel"} {
			if got[i] != want[i] {
				t.Errorf("%s: %s = %v, want %v", tc.name, what, got[i], want[i])
			}
		}
	}
}
