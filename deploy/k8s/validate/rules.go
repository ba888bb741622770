package validate

import (
	"fmt"
	"regexp"
)

// promDuration is Prometheus's duration syntax (model.ParseDuration):
// units from years to milliseconds, largest first, each at most once.
var promDuration = regexp.MustCompile(`^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$`)

func checkPrometheusRules(s *Set) []error {
	var errs []error
	for _, pr := range s.PrometheusRules {
		id := "PrometheusRule/" + pr.Name
		seen := map[string]bool{}
		for gi, g := range pr.Spec.Groups {
			if g.Name == "" {
				errs = append(errs, fmt.Errorf("%s: group %d has no name", id, gi))
			}
			if seen[g.Name] {
				errs = append(errs, fmt.Errorf("%s: group %q twice: Prometheus refuses the file", id, g.Name))
			}
			seen[g.Name] = true
			for ri, r := range g.Rules {
				rid := fmt.Sprintf("%s group %q rule %d", id, g.Name, ri)
				if (r.Alert == "") == (r.Record == "") {
					errs = append(errs, fmt.Errorf("%s: needs exactly one of alert and record", rid))
				}
				if r.Expr.String() == "" {
					errs = append(errs, fmt.Errorf("%s: no expr", rid))
				}
				if r.Record != "" && (r.For != "" || len(r.Annotations) > 0) {
					errs = append(errs, fmt.Errorf("%s: a recording rule has no for or annotations", rid))
				}
				for name, v := range map[string]string{"for": r.For, "keep_firing_for": r.KeepFiringFor} {
					if v == "" {
						continue
					}
					if !promDuration.MatchString(v) {
						errs = append(errs, fmt.Errorf("%s: %s %q is not a duration", rid, name, v))
					}
				}
			}
		}
	}
	return errs
}
