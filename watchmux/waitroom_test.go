package watchmux

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// TestStreamThatWaitsForRoomNeverOverflows: a stream that waits in
// WaitRoom before each Send is held back by a client that does not read,
// instead of being closed with 410, and every event arrives, in order,
// once the client reads again.
func TestStreamThatWaitsForRoomNeverOverflows(t *testing.T) {
	o := DefaultOptions()
	o.ChannelQueue = 4
	_, hs, _ := startServer(t, o)
	ws := rawDial(t, hs)
	const n = 20000 // ~700 KB of frames: more than the socket buffers hold while the client does not read
	send(t, ws, `{"id":1,"watch":{"selector":{"resource":{"version":"v1","resource":"patient-20000"}}}}`)
	time.Sleep(time.Second) // read nothing: the stream fills the queue and waits
	want := 0
	for want < n {
		msg := read(t, ws)
		if msg.Response != nil {
			continue
		}
		if msg.Type != watch.Added {
			t.Fatalf("after %d events: %s %s", want, msg.Type, msg.Object)
		}
		var o struct{ N int }
		if err := json.Unmarshal(msg.Object, &o); err != nil || o.N != want {
			t.Fatalf("event %d carries %s", want, msg.Object)
		}
		want++
	}
}
