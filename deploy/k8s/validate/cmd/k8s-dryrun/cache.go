package main

import (
	"k8s.io/client-go/discovery"
)

// memCache makes a plain discovery client a CachedDiscoveryInterface: the
// server's API groups do not change during a run.
type memCache struct{ discovery.DiscoveryInterface }

func (memCache) Fresh() bool { return true }
func (memCache) Invalidate() {}
