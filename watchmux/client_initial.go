package watchmux

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// initialState is what a client channel opened with sendInitialEvents
// keeps for its consumer beyond ClientEventBuffer: the server sends an
// initial state as fast as it can write (Sink.Initial: bounded by its
// cache, not by ChannelQueue), faster than a consumer that relays each
// event to an HTTP client takes them, and before the caller of Watch has
// even started reading. Held in Events' buffer alone, the initial state
// of a few thousand Services overran it on every attempt, and the
// channel ended with ERROR 410 each time it was asked again. The client
// holds the initial events however many they are, as the server queues
// them, which costs what the list of the same objects costs, and a
// forwarder goroutine hands them to Events in order. From the bookmark
// that ends the initial state (k8s.io/initial-events-end) on, the events
// that follow it are bounded again: the channel ends with 410 when
// ClientEventBuffer of them are held, as a channel without an initial
// state ends when its buffer is full. Only those count, so that changes
// arriving while the consumer still reads a large initial state (a busy
// cluster's EndpointSlices) do not end the channel.
type initialState struct {
	mu sync.Mutex
	// held are the events taken off the connection that Events has no
	// room for yet, in order.
	held []Event
	// initial: the initial state's closing bookmark has not come yet.
	initial bool
	// initialHeld counts the events of the initial state (its bookmark
	// included) at the front of held.
	initialHeld int
	// ended: nothing follows held; Events closes after them.
	ended bool
	// wake has a token when held or ended changed.
	wake chan struct{}
	// dropped is closed when the consumer closed the channel: what is
	// held goes, and Events closes at once.
	dropped     chan struct{}
	droppedOnce sync.Once
}

func newInitialState() *initialState {
	return &initialState{initial: true, wake: make(chan struct{}, 1), dropped: make(chan struct{})}
}

// full reports whether the consumer has left ClientEventBuffer events
// unread: for a channel with an initial state, ClientEventBuffer events
// after it held (never during it). Called under Client.mu.
func (ch *Channel) full() bool {
	s := ch.initial
	if s == nil {
		return len(ch.events) >= ClientEventBuffer
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.initial && len(s.held)-s.initialHeld >= ClientEventBuffer
}

// put hands ev to the consumer: into Events, whose room full has
// checked, or to the forwarder.
func (ch *Channel) put(ev Event) {
	s := ch.initial
	if s == nil {
		ch.events <- ev
		return
	}
	s.mu.Lock()
	s.held = append(s.held, ev)
	if s.initial {
		s.initialHeld++
	}
	if s.initial && ev.Type == watch.Bookmark {
		if m, err := eventMeta(ev); err == nil && m.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
			s.initial = false
		}
	}
	s.mu.Unlock()
	clientEventsHeld.Inc()
	s.signal()
}

// end says no event follows; dropped: the consumer closed the channel,
// and what is held is not wanted.
func (ch *Channel) end(dropped bool) {
	if dropped {
		ch.drop()
	}
	s := ch.initial
	if s == nil {
		close(ch.events)
		return
	}
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.signal()
}

// drop lets what is held for the consumer of a channel with an initial
// state go, and closes its Events: the consumer closed the channel.
func (ch *Channel) drop() {
	if s := ch.initial; s != nil {
		s.droppedOnce.Do(func() { close(s.dropped) })
	}
}

func (s *initialState) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// forward moves the held events into Events, in order, and closes Events
// once the channel has ended and nothing is held. When the connection
// ends, what it brought is still handed over, to the last event, before
// Events closes: the consumer resumes from the last event it took, so
// an event dropped here would only move its resume point back. That
// costs more than the repeat: a replica shutting down bookmarks every
// node view at its position and then ends each channel with ERROR 503
// (the resume point that reaches past every change it sent); a view
// resumed from the bookmark before it, on a replica started since,
// whose change log does not reach back there, is sent afresh, which the
// node's copy takes as a relist, and its watchers miss the versions in
// between. The ERROR itself, when the server ended the channel with one
// (a 401 at a refused credential), comes last, as it says why the
// channel ended. Only the consumer closing the channel (dropped) lets
// what is held go.
func (ch *Channel) forward() {
	s := ch.initial
	defer close(ch.events)
	defer func() {
		s.mu.Lock()
		clientEventsHeld.Add(-float64(len(s.held)))
		s.held, s.initialHeld = nil, 0
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		if len(s.held) == 0 {
			ended := s.ended
			s.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-s.wake:
				continue
			case <-s.dropped:
				return
			}
		}
		ev := s.held[0]
		s.held[0] = Event{}
		s.held = s.held[1:]
		if s.initialHeld > 0 {
			s.initialHeld--
		}
		if len(s.held) == 0 {
			s.held = nil // let a large initial state's array go
		}
		s.mu.Unlock()
		clientEventsHeld.Dec()
		select {
		case ch.events <- ev:
		case <-s.dropped:
			return
		}
	}
}
