// Package sub is a second checked package.
package sub

// T is a type with a field.
type T struct{ A Undefined }
