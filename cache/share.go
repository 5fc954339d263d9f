package cache

import (
	"bytes"
	"reflect"
	"sync"
)

// slimVersion makes next, a version the store has just decoded and not yet
// published, hold as little memory as it can without changing: every
// part of prev (the version it replaces, or nil) that it holds unchanged
// becomes prev's (equal strings, slices, maps and pointed-to structs, so
// next's own copies become garbage), and its other slices are cut to
// their length.
//
// Why share: the change log keeps every version it holds decoded, and
// most versions differ from the one before in a few fields. A kubelet
// writes its pod's status several times as the pod starts, and each write
// brings the whole spec again (its volumes, containers and mounts); a
// Node's status writes bring its images, capacity and node info again.
// Without sharing, each version in the log costs the whole object; with
// it, about what changed.
//
// Why cut: decoders grow a list by appending, so a list of 21 volumes
// (256 bytes each) sits in an array of 32 for as long as the version is
// kept. docs/benchmarks.md ("The cache's history") has the figures.
//
// next stays equal to what was decoded (reflect.DeepEqual): a part is
// replaced only by an equal one, and only where prev is equal to next
// down to its unexported fields. Objects are immutable once published
// (Object), so sharing between versions is safe; next is the writer's
// alone until it publishes it.
func slimVersion(next, prev any) {
	n, p := reflect.ValueOf(next), reflect.ValueOf(prev)
	if n.Kind() != reflect.Pointer || n.IsNil() {
		return
	}
	if p.Kind() != reflect.Pointer || p.IsNil() || n.Type() != p.Type() {
		trim(n.Elem())
		return
	}
	share(n.Elem(), p.Elem())
}

// share makes dst, a settable value, reuse the parts of src equal to its
// own, and trims what it does not share; it reports whether the two are
// equal.
func share(dst, src reflect.Value) bool {
	switch dst.Kind() {
	case reflect.String:
		if dst.String() != src.String() {
			return false
		}
		dst.Set(src)
		return true
	case reflect.Pointer:
		if dst.IsNil() || src.IsNil() {
			trim(dst)
			return dst.IsNil() == src.IsNil()
		}
		if dst.UnsafePointer() == src.UnsafePointer() {
			return true
		}
		if !share(dst.Elem(), src.Elem()) {
			return false
		}
		dst.Set(src)
		return true
	case reflect.Slice:
		return shareSlice(dst, src)
	case reflect.Map:
		if dst.IsNil() != src.IsNil() || dst.Len() != src.Len() || !reflect.DeepEqual(dst.Interface(), src.Interface()) {
			return false
		}
		dst.Set(src)
		return true
	case reflect.Struct:
		if opaque(dst.Type()) {
			// Unexported fields (metav1.Time, resource.Quantity) cannot
			// be set one by one: the whole value or nothing.
			if !reflect.DeepEqual(dst.Interface(), src.Interface()) {
				return false
			}
			dst.Set(src)
			return true
		}
		equal := true
		for i := range dst.NumField() {
			if !share(dst.Field(i), src.Field(i)) {
				equal = false
			}
		}
		return equal
	case reflect.Interface, reflect.Array:
		if dst.Kind() == reflect.Interface && (dst.IsNil() || src.IsNil()) {
			return dst.IsNil() == src.IsNil()
		}
		if !reflect.DeepEqual(dst.Interface(), src.Interface()) {
			return false
		}
		dst.Set(src)
		return true
	default:
		// Numbers and booleans: held inline, nothing to share. Funcs
		// and channels are no part of an API object, and never equal.
		return dst.Comparable() && dst.Equal(src)
	}
}

// shareSlice shares src whole when dst is equal to it, or else its equal
// elements, index by index (a condition that changed leaves the others
// shared), and trims dst.
func shareSlice(dst, src reflect.Value) bool {
	if dst.IsNil() || src.IsNil() {
		trim(dst)
		return dst.IsNil() == src.IsNil()
	}
	if dst.Len() == src.Len() && dst.UnsafePointer() == src.UnsafePointer() {
		return true
	}
	if dst.Type().Elem().Kind() == reflect.Uint8 {
		if !bytes.Equal(dst.Bytes(), src.Bytes()) {
			trim(dst)
			return false
		}
		dst.Set(src)
		return true
	}
	equal := dst.Len() == src.Len()
	for i := range dst.Len() {
		if i >= src.Len() {
			trim(dst.Index(i))
		} else if !share(dst.Index(i), src.Index(i)) {
			equal = false
		}
	}
	if equal {
		dst.Set(src)
		return true
	}
	cut(dst)
	return false
}

// trim cuts every slice of v, which shares nothing with another version,
// to its length.
func trim(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			trim(v.Elem())
		}
	case reflect.Struct:
		if !opaque(v.Type()) {
			for i := range v.NumField() {
				trim(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		if k := v.Type().Elem().Kind(); k == reflect.Pointer || k == reflect.Struct || k == reflect.Slice {
			for i := range v.Len() {
				trim(v.Index(i))
			}
		}
		cut(v)
	}
}

// cut reallocates the slice v at its length, if its array is longer.
func cut(v reflect.Value) {
	if v.Cap() == v.Len() {
		return
	}
	exact := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
	reflect.Copy(exact, v)
	v.Set(exact)
}

// opaqueTypes remembers, per struct type, whether it has an unexported
// field.
var opaqueTypes sync.Map // reflect.Type -> bool

func opaque(t reflect.Type) bool {
	if v, ok := opaqueTypes.Load(t); ok {
		return v.(bool)
	}
	o := false
	for i := range t.NumField() {
		if !t.Field(i).IsExported() {
			o = true
			break
		}
	}
	opaqueTypes.Store(t, o)
	return o
}
