package upstream

import "strings"

// Method is a block's balancing-method directive, as nginx 1.22 reads it.
// The zero value, Name "", is round robin: the block has no directive.
//
//	hash KEY [consistent]     Name "hash", Key KEY, Consistent
//	ip_hash                   Name "ip_hash"
//	least_conn                Name "least_conn"
//	random [two [least_conn]] Name "random", Two
//
// least_conn is the only way, and nginx's default, for `random two` to
// choose between its two draws, so `random two least_conn` is `random two`.
// A Method is plain data, safe for concurrent reads.
type Method struct {
	Name       string // "", "hash", "ip_hash", "least_conn" or "random"
	Key        string // the KEY of hash as written, e.g. "$request_uri"
	Consistent bool   // hash KEY consistent (ketama)
	Two        bool   // random two: the less loaded of two draws
	Line       int    // line of the directive; 0 for round robin
}

// String returns the directive as written without its ";", such as
// "hash $request_uri consistent", or "round robin" for the zero Method.
func (m Method) String() string {
	words := []string{m.Name}
	switch {
	case m.Name == "":
		return "round robin"
	case m.Name == "hash":
		words = append(words, m.Key)
		if m.Consistent {
			words = append(words, "consistent")
		}
	case m.Two:
		words = append(words, "two")
	}
	return strings.Join(words, " ")
}

// allowsBackup reports whether servers after m may be backups: nginx
// refuses `backup` with hash, ip_hash and random ("balancing method does
// not support parameter"), and allows it with round robin and least_conn.
func (m Method) allowsBackup() bool { return m.Name == "" || m.Name == "least_conn" }

// methodArgs is how many arguments each method directive takes, at least
// and at most, as nginx declares them (NGX_CONF_NOARGS, TAKE12).
var methodArgs = map[string][2]int{
	"hash":       {1, 2},
	"ip_hash":    {0, 0},
	"least_conn": {0, 0},
	"random":     {0, 2},
}

// method parses a balancing-method directive, words[0] one of methodArgs,
// ended by ";". A later method directive replaces an earlier one, as in
// nginx (which warns "load balancing method redefined").
func (p *parser) method(words []token) (Method, *ParseError) {
	name, args := words[0], words[1:]
	if n := methodArgs[name.text]; len(args) < n[0] || len(args) > n[1] {
		return Method{}, p.errorf(name.line, ErrSyntax, "invalid number of arguments in %v directive", name)
	}
	m := Method{Name: name.text, Line: name.line}
	bad := func(w token) (Method, *ParseError) {
		return Method{}, p.errorf(w.line, ErrInvalidParam, "invalid parameter %v in %v directive", w, name)
	}
	switch m.Name {
	case "hash":
		m.Key = args[0].text
		if len(args) == 2 {
			if args[1].text != "consistent" {
				return bad(args[1])
			}
			m.Consistent = true
		}
	case "random":
		if len(args) >= 1 {
			if args[0].text != "two" {
				return bad(args[0])
			}
			m.Two = true
		}
		if len(args) == 2 && args[1].text != "least_conn" {
			return bad(args[1])
		}
	}
	return m, nil
}
