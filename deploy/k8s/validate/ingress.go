package validate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// What an Ingress in front of headcount must route: a Pusher WebSocket
// path to wsnode and an HTTP API path to httpapi.
var ingressRoutes = []struct{ path, binary string }{
	{"/app/app-key", "wsnode"},
	{"/apps/app-id/events", "httpapi"},
}

// minProxyTimeout is the shortest proxy read and send timeout, in seconds,
// that keeps a quiet WebSocket open: pusher-js sends a ping only after
// activity_timeout (120 s, protocol.ActivityTimeout) of silence and waits
// 30 s for the pong.
const minProxyTimeout = 150

// ingress-nginx's annotations that bound a WebSocket's silence.
var proxyTimeouts = []string{
	"nginx.ingress.kubernetes.io/proxy-read-timeout",
	"nginx.ingress.kubernetes.io/proxy-send-timeout",
}

func checkIngresses(s *Set) []error {
	var errs []error
	for _, ing := range s.Ingresses {
		id := "Ingress/" + ing.Name
		serves := map[string]bool{} // binaries a backend of this Ingress reaches
		for _, rule := range ing.Spec.Rules {
			if rule.HTTP == nil {
				continue
			}
			for _, p := range rule.HTTP.Paths {
				bin, err := s.ingressBackend(p.Backend)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s host %q path %s: %w", id, rule.Host, p.Path, err))
					continue
				}
				serves[bin] = true
			}
		}
		if !serves["wsnode"] && !serves["httpapi"] {
			continue // not in front of headcount
		}
		for _, rule := range ing.Spec.Rules {
			for _, r := range ingressRoutes {
				p := longestMatch(rule.HTTP, r.path)
				if p == nil {
					errs = append(errs, fmt.Errorf("%s host %q: no path takes %s, which %s serves", id, rule.Host, r.path, r.binary))
					continue
				}
				if bin, _ := s.ingressBackend(p.Backend); bin != r.binary {
					errs = append(errs, fmt.Errorf("%s host %q: %s goes to %s (path %s), not to %s", id, rule.Host, r.path, orNone(bin), p.Path, r.binary))
				}
			}
			if !slices.ContainsFunc(ing.Spec.TLS, func(t networkingv1.IngressTLS) bool {
				return t.SecretName != "" && slices.Contains(t.Hosts, rule.Host)
			}) {
				errs = append(errs, fmt.Errorf("%s host %q: no tls entry with a secretName covers it; browsers on https pages need wss://", id, rule.Host))
			}
		}
		if serves["wsnode"] {
			for _, a := range proxyTimeouts {
				v, ok := ing.Annotations[a]
				n, err := strconv.Atoi(v)
				if !ok || err != nil || n < minProxyTimeout {
					errs = append(errs, fmt.Errorf("%s: %s is %q; WebSockets need at least %d (seconds): pusher-js pings only after 120 s of silence", id, a, v, minProxyTimeout))
				}
			}
		}
	}
	return errs
}

func orNone(s string) string {
	if s == "" {
		return "nothing of headcount"
	}
	return s
}

// ingressBackend returns the headcount binary a backend reaches ("" for
// another), or an error when its Service or port is not in the render.
func (s *Set) ingressBackend(b networkingv1.IngressBackend) (string, error) {
	if b.Service == nil {
		return "", fmt.Errorf("backend is not a Service")
	}
	svc := s.Service(b.Service.Name)
	if svc == nil {
		return "", fmt.Errorf("Service %q is not in the render", b.Service.Name)
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
		return (b.Service.Port.Name != "" && p.Name == b.Service.Port.Name) || (b.Service.Port.Number != 0 && p.Port == b.Service.Port.Number)
	}) {
		port := b.Service.Port.Name
		if port == "" {
			port = strconv.Itoa(int(b.Service.Port.Number))
		}
		return "", fmt.Errorf("port %s is not a port of Service/%s", port, svc.Name)
	}
	for _, w := range s.SelectedByMap(svc.Spec.Selector) {
		if name := w.Template.Labels[nameLabel]; publicBinaries[name] {
			return name, nil
		}
	}
	return "", nil
}

// longestMatch is the path an Ingress controller picks for a request path:
// the longest matching one, Exact before Prefix, Prefix matching whole
// path elements (the Ingress API's rules).
func longestMatch(h *networkingv1.HTTPIngressRuleValue, path string) *networkingv1.HTTPIngressPath {
	if h == nil {
		return nil
	}
	var best *networkingv1.HTTPIngressPath
	score := -1
	for i := range h.Paths {
		p := &h.Paths[i]
		exact := p.PathType != nil && *p.PathType == networkingv1.PathTypeExact
		var ok bool
		if exact {
			ok = p.Path == path
		} else {
			prefix := strings.TrimSuffix(p.Path, "/")
			ok = prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/")
		}
		sc := len(p.Path) * 2
		if exact {
			sc++
		}
		if ok && sc > score {
			best, score = p, sc
		}
	}
	return best
}
