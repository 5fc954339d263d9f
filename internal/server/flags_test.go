package server

import (
	cliflag "k8s.io/component-base/cli/flag"
)

// setFlag sets a flag by name in whichever section holds it.
func setFlag(fss cliflag.NamedFlagSets, name, value string) bool {
	for _, fs := range fss.FlagSets {
		if f := fs.Lookup(name); f != nil {
			return fs.Set(name, value) == nil
		}
	}
	return false
}
