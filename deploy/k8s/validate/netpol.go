package validate

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func hasPolicyType(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	return slices.Contains(np.Spec.PolicyTypes, t)
}

func emptySelector(np *networkingv1.NetworkPolicy) bool {
	return len(np.Spec.PodSelector.MatchLabels)+len(np.Spec.PodSelector.MatchExpressions) == 0
}

// openPeer says whether a rule's peers are everyone: no peers, or an
// ipBlock of the whole address space.
func openPeer(peers []networkingv1.NetworkPolicyPeer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil && (p.IPBlock.CIDR == "0.0.0.0/0" || p.IPBlock.CIDR == "::/0") {
			return true
		}
	}
	return false
}

// binaryOf is the headcount binary a workload runs, or "".
func binaryOf(w Workload) (string, *corev1.Container) {
	for i := range w.Template.Spec.Containers {
		if b := Binary(&w.Template.Spec.Containers[i]); b != "" {
			return b, &w.Template.Spec.Containers[i]
		}
	}
	return "", nil
}

// redisPorts are the ports a headcount container dials Redis on (with
// Sentinel, the sentinels' ports: the master's is learnt from them).
func (s *Set) redisPorts(c *corev1.Container) []string {
	for _, flag := range []string{"redis-cluster", "redis-sentinel"} {
		seeds, _ := s.Setting(c, flag)
		if seeds == "" {
			continue
		}
		var out []string
		for _, seed := range RedisSeeds(seeds) {
			if p, err := AddrPort(seed); err == nil && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		return out
	}
	raw, _ := s.Setting(c, "redis")
	if u, err := url.Parse(raw); err == nil && raw != "" {
		if p := u.Port(); p != "" {
			return []string{p}
		}
		return []string{"6379"}
	}
	return nil
}

// denyAll says whether a policy isolates what it selects both ways and
// allows nothing: a default deny.
func denyAll(np *networkingv1.NetworkPolicy) bool {
	return hasPolicyType(np, networkingv1.PolicyTypeIngress) && hasPolicyType(np, networkingv1.PolicyTypeEgress) && len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0
}

func checkNetworkPolicies(s *Set) []error {
	var errs []error
	denied, dns := map[string]bool{}, map[string]bool{}
	policiesOf := map[string][]*networkingv1.NetworkPolicy{}
	for _, np := range s.NetworkPolicies {
		id := "NetworkPolicy/" + np.Name
		if emptySelector(np) {
			errs = append(errs, fmt.Errorf("%s: podSelector {} selects every pod of the namespace, other applications' too; select headcount's own", id))
		}
		selected, err := s.Selected(&np.Spec.PodSelector)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: podSelector: %w", id, err))
			continue
		}
		if len(selected) == 0 {
			errs = append(errs, fmt.Errorf("%s: podSelector selects no pods of the render", id))
		}
		for _, w := range selected {
			policiesOf[w.ID()] = append(policiesOf[w.ID()], np)
			if denyAll(np) {
				denied[w.ID()] = true
			}
		}
		for i, rule := range np.Spec.Ingress {
			errs = append(errs, s.peersSelect(id, "ingress", i, rule.From)...)
			for _, p := range rule.Ports {
				if p.Port == nil || p.Port.String() == "" {
					continue
				}
				for _, w := range selected {
					if cp, _ := ContainerPort(&w.Template.Spec, p.Port.String()); cp == nil && !w.RunsOnce() {
						errs = append(errs, fmt.Errorf("%s: ingress rule %d: port %s is no port of %s, so the rule allows nothing there", id, i, p.Port.String(), w.ID()))
					}
				}
			}
			if !openPeer(rule.From) {
				continue
			}
			if len(rule.Ports) == 0 {
				errs = append(errs, fmt.Errorf("%s: ingress rule %d opens every port to everyone", id, i))
				continue
			}
			for _, w := range selected {
				b, c := binaryOf(w)
				if !publicBinaries[b] {
					errs = append(errs, fmt.Errorf("%s: ingress rule %d lets anyone reach %s; only wsnode and httpapi take outside traffic", id, i, w.ID()))
					continue
				}
				addr, _ := s.Setting(c, "addr")
				public, _ := AddrPort(addr)
				for _, p := range rule.Ports {
					cp, _ := ContainerPort(&w.Template.Spec, p.Port.String())
					if cp == nil || strconv.Itoa(int(cp.ContainerPort)) != public {
						errs = append(errs, fmt.Errorf("%s: ingress rule %d opens port %s of %s to everyone; only its public port %s may be", id, i, p.Port.String(), w.ID(), public))
					}
				}
			}
		}
		for i, rule := range np.Spec.Egress {
			errs = append(errs, s.peersSelect(id, "egress", i, rule.To)...)
			for _, p := range rule.Ports {
				if p.Port != nil && p.Port.String() == "53" && (p.Protocol == nil || *p.Protocol == corev1.ProtocolUDP) {
					for _, w := range selected {
						dns[w.ID()] = true
					}
				}
			}
		}
	}
	for _, w := range s.Workloads() {
		b, c := binaryOf(w)
		if b != "" && !denied[w.ID()] {
			errs = append(errs, fmt.Errorf("%s: no default-deny policy (Ingress and Egress, no rules) selects it: what no other policy allows stays open", w.ID()))
		}
		if b != "" && !dns[w.ID()] {
			errs = append(errs, fmt.Errorf("%s: no policy lets it reach DNS (UDP 53): under default deny nothing resolves Redis", w.ID()))
		}
		if !hasIsolation(policiesOf[w.ID()], networkingv1.PolicyTypeEgress) || !hasIsolation(policiesOf[w.ID()], networkingv1.PolicyTypeIngress) {
			errs = append(errs, fmt.Errorf("%s: no policy isolates it both ways (Ingress and Egress policy types): it is open where none applies", w.ID()))
		}
		switch {
		case b != "":
			for _, port := range s.redisPorts(c) {
				if !s.egressAllows(policiesOf[w.ID()], port) {
					errs = append(errs, fmt.Errorf("%s: no policy lets it reach Redis on port %s", w.ID(), port))
				}
			}
		case w.Template.Labels[nameLabel] == "redis":
			errs = append(errs, s.redisOnlyFromHeadcount(w, policiesOf[w.ID()])...)
		}
		if b == "wsnode" {
			errs = append(errs, s.cleanersWatch(w, c, policiesOf)...)
		}
	}
	return errs
}

// cleanersWatch checks that the cleaners can watch wsnode w (GET /liveness
// on its admin port, at its --advertise-host): w advertises a host, and
// the policies let every cleaner reach w's admin port, egress from the
// cleaner and ingress to w. Otherwise a killed node waits for the
// liveness check.
func (s *Set) cleanersWatch(w Workload, c *corev1.Container, policiesOf map[string][]*networkingv1.NetworkPolicy) []error {
	var errs []error
	if v, _ := s.Setting(c, "advertise-host"); v == "" {
		errs = append(errs, fmt.Errorf("%s: no --advertise-host (HEADCOUNT_ADVERTISE_HOST, e.g. the pod IP): the cleaners cannot watch it, and a killed node is reaped only after --liveness-grace", w.ID()))
	}
	admin, _ := ContainerPort(&w.Template.Spec, "metrics")
	if admin == nil {
		return append(errs, fmt.Errorf("%s: no port named metrics: the cleaners cannot watch it", w.ID()))
	}
	adminPort := func(ports []networkingv1.NetworkPolicyPort) bool {
		return len(ports) == 0 || slices.ContainsFunc(ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port == nil || p.Port.String() == admin.Name || p.Port.String() == strconv.Itoa(int(admin.ContainerPort))
		})
	}
	selects := func(peers []networkingv1.NetworkPolicyPeer, target Workload) bool {
		return len(peers) == 0 || slices.ContainsFunc(peers, func(p networkingv1.NetworkPolicyPeer) bool {
			if p.PodSelector == nil || p.NamespaceSelector != nil {
				return false
			}
			ws, _ := s.Selected(p.PodSelector)
			return slices.ContainsFunc(ws, func(x Workload) bool { return x.ID() == target.ID() })
		})
	}
	for _, cl := range s.Workloads() {
		if b, _ := binaryOf(cl); b != "cleaner" || cl.RunsOnce() {
			continue
		}
		in := slices.ContainsFunc(policiesOf[w.ID()], func(np *networkingv1.NetworkPolicy) bool {
			return hasPolicyType(np, networkingv1.PolicyTypeIngress) && slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
				return selects(r.From, cl) && adminPort(r.Ports)
			})
		})
		out := slices.ContainsFunc(policiesOf[cl.ID()], func(np *networkingv1.NetworkPolicy) bool {
			return hasPolicyType(np, networkingv1.PolicyTypeEgress) && slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
				return selects(r.To, w) && adminPort(r.Ports)
			})
		})
		if !in {
			errs = append(errs, fmt.Errorf("%s: no ingress rule lets %s reach its admin port %s, so the cleaner cannot watch it", w.ID(), cl.ID(), admin.Name))
		}
		if !out {
			errs = append(errs, fmt.Errorf("%s: no egress rule lets it reach the admin port %s of %s, so it cannot watch it", cl.ID(), admin.Name, w.ID()))
		}
	}
	return errs
}

func hasIsolation(nps []*networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	return slices.ContainsFunc(nps, func(np *networkingv1.NetworkPolicy) bool { return hasPolicyType(np, t) })
}

// peersSelect reports peers whose podSelector (in this namespace) selects
// no pod: such a rule allows nothing, which is never what was meant.
func (s *Set) peersSelect(id, dir string, i int, peers []networkingv1.NetworkPolicyPeer) []error {
	var errs []error
	for _, p := range peers {
		if p.PodSelector == nil || p.NamespaceSelector != nil {
			continue
		}
		if ws, err := s.Selected(p.PodSelector); err != nil || len(ws) == 0 {
			errs = append(errs, fmt.Errorf("%s: %s rule %d: peer podSelector %v selects no pods of the render", id, dir, i, p.PodSelector.MatchLabels))
		}
	}
	return errs
}

// egressAllows says whether any of the policies allows egress to port.
func (s *Set) egressAllows(nps []*networkingv1.NetworkPolicy, port string) bool {
	for _, np := range nps {
		if !hasPolicyType(np, networkingv1.PolicyTypeEgress) {
			continue
		}
		for _, rule := range np.Spec.Egress {
			if len(rule.Ports) == 0 {
				return true
			}
			for _, p := range rule.Ports {
				if p.Port == nil || p.Port.String() == port {
					return true
				}
			}
		}
	}
	return false
}

// toolbox is the pod label (app.kubernetes.io/name) of the chart's
// redis-cli pod for the runbooks: the one Redis client beside the binaries.
const toolbox = "toolbox"

// metricsOnly says whether rule admits to the port named metrics alone.
func metricsOnly(rule networkingv1.NetworkPolicyIngressRule) bool {
	return len(rule.Ports) > 0 && !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
		return p.Port == nil || p.Port.String() != "metrics"
	})
}

// redisOnlyFromHeadcount checks that every ingress rule reaching an
// in-cluster Redis's data port comes only from headcount pods of this
// namespace, or their toolbox.
func (s *Set) redisOnlyFromHeadcount(w Workload, nps []*networkingv1.NetworkPolicy) []error {
	var errs []error
	guarded := false
	for _, np := range nps {
		if !hasPolicyType(np, networkingv1.PolicyTypeIngress) {
			continue
		}
		guarded = true
		for i, rule := range np.Spec.Ingress {
			if metricsOnly(rule) {
				continue // redis_exporter's port, scraped as the binaries' are
			}
			if len(rule.From) == 0 {
				errs = append(errs, fmt.Errorf("NetworkPolicy/%s: ingress rule %d lets anyone reach %s; only headcount pods may", np.Name, i, w.ID()))
				continue
			}
			for _, p := range rule.From {
				if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil {
					errs = append(errs, fmt.Errorf("NetworkPolicy/%s: ingress rule %d lets other namespaces or addresses reach %s", np.Name, i, w.ID()))
					continue
				}
				peers, _ := s.Selected(p.PodSelector)
				for _, pw := range peers {
					if b, _ := binaryOf(pw); b == "" && pw.Template.Labels[nameLabel] != toolbox {
						errs = append(errs, fmt.Errorf("NetworkPolicy/%s: ingress rule %d lets %s reach %s; only headcount pods and their toolbox may", np.Name, i, pw.ID(), w.ID()))
					}
				}
			}
		}
	}
	if !guarded {
		errs = append(errs, fmt.Errorf("%s: no ingress policy selects it", w.ID()))
	}
	return errs
}
