package get

import (
	"bufio"
	"io"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
)

// Answer is a bulk get's answer before it is written: one list per
// operation, each a slice of references to the cache's encoded objects.
// Its cost beyond the cache is a slice header (24 bytes) per item, however
// large the items: 300 copies of a 700 KiB secret are one encoded secret
// and 300 references, not 300 copies (docs/benchmarks.md, "What one
// answer costs the hub").
type Answer struct {
	lists []list
	size  int
}

// Size bounds the length of the answer's results in JSON, in bytes: what
// the client will receive, whoever encodes it.
func (a *Answer) Size() int { return a.size }

// Results builds the results in memory: one buffer holding a copy of
// every item. For encodings the stream cannot produce (YAML, indented
// JSON) and for tests.
func (a *Answer) Results() []runtime.RawExtension {
	buf := make([]byte, 0, a.size)
	results := make([]runtime.RawExtension, len(a.lists))
	for i := range a.lists {
		start := len(buf)
		buf = a.lists[i].appendJSON(buf)
		results[i].Raw = buf[start:len(buf):len(buf)]
	}
	return results
}

// writeResults writes the results as the elements of a JSON array,
// comma-separated, without the brackets. Items are written straight from
// the cache's bytes; only the lists' short headers pass through a buffer
// of bufferSize.
func (a *Answer) writeResults(w io.Writer) error {
	bw := bufio.NewWriterSize(w, bufferSize)
	var head []byte
	for i := range a.lists {
		l := &a.lists[i]
		head = head[:0]
		if i > 0 {
			head = append(head, ',')
		}
		if l.raw != nil {
			head = append(head, l.raw...)
			if _, err := bw.Write(head); err != nil {
				return err
			}
			continue
		}
		head = l.appendHead(head)
		if _, err := bw.Write(head); err != nil {
			return err
		}
		for j, it := range l.items {
			if j > 0 {
				if err := bw.WriteByte(','); err != nil {
					return err
				}
			}
			// A large item goes past the buffer to w, uncopied.
			if _, err := bw.Write(it); err != nil {
				return err
			}
		}
		if _, err := bw.WriteString("]}"); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// bufferSize gathers the small writes (list headers, commas, small
// items) into writes the size of a TLS record's payload.
const bufferSize = 16 << 10

// size bounds the length of l's JSON.
func (l *list) size() int {
	if l.raw != nil {
		return len(l.raw) + 1
	}
	n := 128 + len(l.store.Kind) + len(l.cont)
	for _, it := range l.items {
		n += len(it) + 1
	}
	return n
}

// appendJSON appends l shaped like kube-apiserver's lists (SecretList,
// ...) around the already encoded items.
func (l *list) appendJSON(b []byte) []byte {
	if l.raw != nil {
		return append(b, l.raw...)
	}
	b = l.appendHead(b)
	for i, it := range l.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, "]}"...)
}

// appendHead appends l's JSON up to its first item.
func (l *list) appendHead(b []byte) []byte {
	b = append(b, `{"kind":"`...)
	b = append(b, l.store.Kind...)
	b = append(b, `List","apiVersion":"`...)
	b = append(b, l.store.Resource.GroupVersion().String()...)
	b = append(b, `","metadata":{"resourceVersion":"`...)
	b = strconv.AppendUint(b, l.rv, 10)
	b = append(b, '"')
	if l.cont != "" {
		b = append(b, `,"continue":"`...)
		b = append(b, l.cont...) // base64url: nothing to escape
		b = append(b, '"')
	}
	return append(b, `},"items":[`...)
}
