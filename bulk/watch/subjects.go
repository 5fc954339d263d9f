package watch

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Subjects are the users whose channels a change of authorization may
// concern: by user name (a ServiceAccount is its user name,
// system:serviceaccount:<namespace>:<name>) or by a group they belong to
// (system:authenticated names every authenticated user). They only choose
// whom to ask again; the answer is still the authorizer's.
type Subjects struct {
	Users  sets.Set[string]
	Groups sets.Set[string]
}

// Empty reports whether s names nobody.
func (s Subjects) Empty() bool { return s.Users.Len() == 0 && s.Groups.Len() == 0 }

// Matches reports whether u is one of s: named, or in a named group.
func (s Subjects) Matches(u user.Info) bool {
	if s.Users.Has(u.GetName()) {
		return true
	}
	for _, g := range u.GetGroups() {
		if s.Groups.Has(g) {
			return true
		}
	}
	return false
}

// union adds o's users and groups to s.
func (s *Subjects) union(o Subjects) {
	if s.Users == nil {
		s.Users = sets.New[string]()
	}
	if s.Groups == nil {
		s.Groups = sets.New[string]()
	}
	s.Users.Insert(o.Users.UnsortedList()...)
	s.Groups.Insert(o.Groups.UnsortedList()...)
}
