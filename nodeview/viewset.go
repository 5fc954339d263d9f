package nodeview

import "iter"

// viewSet is the views that reach one object, the value of Views.wants.
// Most objects are reached by one view (a pod's own secrets), so one
// member is held inline and a map is made only for an object several
// views reach (a namespace's kube-root-ca.crt): a map for every object
// would cost the index several times what the view's own entry for the
// object costs.
//
// It has no lock: Views keeps it under its mu.
type viewSet struct {
	one  *view              // the member, when there is exactly one
	more map[*view]struct{} // the members, when there are more
}

// add puts v in s; v is not in it.
func (s *viewSet) add(v *view) {
	switch {
	case s.more != nil:
		s.more[v] = struct{}{}
	case s.one == nil:
		s.one = v
	default:
		s.more = map[*view]struct{}{s.one: {}, v: {}}
		s.one = nil
	}
}

// remove takes v out of s, going back to one member inline when one is
// left, so that an object once shared does not keep its map.
func (s *viewSet) remove(v *view) {
	if s.one == v {
		s.one = nil
		return
	}
	delete(s.more, v)
	if len(s.more) == 1 {
		for w := range s.more {
			s.one = w
		}
		s.more = nil
	}
}

func (s viewSet) empty() bool { return s.one == nil && len(s.more) == 0 }

// all yields the members, in no order.
func (s viewSet) all() iter.Seq[*view] {
	return func(yield func(*view) bool) {
		if s.one != nil {
			yield(s.one)
			return
		}
		for v := range s.more {
			if !yield(v) {
				return
			}
		}
	}
}
