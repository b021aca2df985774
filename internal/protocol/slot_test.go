package protocol

import "testing"

// TestSlot checks the hash slot against what Redis's CLUSTER KEYSLOT
// answers: a tag is the first {...} with something inside; an empty one
// is no tag, and the whole key is hashed.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"foo": 12182, "hello": 866, "{foo}bar": 12182, "{user1000}.following": 3443,
		"a{}b": 13694, "{}": 15257, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
