package lockorder

// Rank is a lock's place in its lock order: a lock may be taken only while
// every lock its goroutine holds has a lower N. Name says which lock it is
// in a report.
type Rank struct {
	N    uint8
	Name string
}

// Ranked is the type parameter of Mutex and RWMutex: a zero-size type whose
// Rank method names the lock's rank.
type Ranked interface{ Rank() Rank }

// Leaf is the rank of a lock under which no other lock is taken. Every
// leaf shares it, so two leaves are never held together.
type Leaf struct{}

// Rank is the highest: nothing may be taken under a leaf.
func (Leaf) Rank() Rank { return Rank{N: 255, Name: "a leaf"} }
