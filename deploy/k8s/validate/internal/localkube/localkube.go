package localkube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Binaries names what to run. Etcd and APIServer are required; the rest
// make it a cluster that runs workloads, and come together.
type Binaries struct {
	Etcd, APIServer string
	// ControllerManager and Scheduler: kube-controller-manager and
	// kube-scheduler of the API server's version.
	ControllerManager, Scheduler string
	// Kwok is sigs.k8s.io/kwok's kwok, run in "manage all nodes" mode
	// with the Stage files KwokStages: it plays the kubelet of every
	// Node, so pods on them become Running and Ready without running.
	Kwok       string
	KwokStages []string
}

// Controllers are kube-controller-manager's controllers that run: what
// Deployments, StatefulSets, autoscalers, budgets, Services, volumes,
// namespaces and garbage collection need, and node-lifecycle, which lifts
// a new Node's not-ready taint and taints a cordoned one. The rest (node
// IPAM, certificates, quotas, taint eviction...) would only cost CPU.
var Controllers = []string{
	"serviceaccount-controller", "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	"namespace-controller", "garbage-collector-controller", "pod-garbage-collector-controller",
	"deployment-controller", "replicaset-controller", "statefulset-controller",
	"horizontal-pod-autoscaler-controller", "disruption-controller",
	"job-controller", "cronjob-controller",
	"endpoints-controller", "endpointslice-controller",
	"persistentvolume-binder-controller", "persistentvolumeclaim-protection-controller", "persistentvolume-protection-controller",
	"node-lifecycle-controller",
}

// Cluster is a running control plane on loopback.
type Cluster struct {
	// Config is an admin's (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the same as a file, for helm and the components.
	Kubeconfig string

	work  string
	log   io.Writer
	procs []*exec.Cmd
	logs  []string
}

// Start runs b's binaries with their state, certificates and logs under
// work (which the caller removes), each on free 127.0.0.1 ports, and
// returns once the API server is ready and, with a controller manager,
// once its controllers act. On failure it stops what it started and the
// error carries the end of each log. Stop ends it all; the processes die
// with this one anyway (PR_SET_PDEATHSIG).
func Start(ctx context.Context, work string, log io.Writer, b Binaries) (*Cluster, error) {
	c := &Cluster{work: work, log: log}
	if err := c.start(ctx, b); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.tails())
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, b Binaries) error {
	if b.Etcd == "" || b.APIServer == "" {
		return errors.New("localkube: etcd and kube-apiserver are required")
	}
	if (b.ControllerManager == "") != (b.Scheduler == "") || (b.Kwok != "" && b.ControllerManager == "") {
		return errors.New("localkube: kube-controller-manager and kube-scheduler come together, and kwok needs them")
	}
	p, err := makePKI(c.work)
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	// A throwaway store: fsync buys nothing here and costs seconds.
	if err := c.spawn("etcd", b.Etcd, nil,
		"--name=localkube", "--data-dir="+filepath.Join(c.work, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=localkube="+peer, "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, http.DefaultClient, client+"/health", `"health":"true"`); err != nil {
		return fmt.Errorf("etcd did not become healthy: %w", err)
	}
	fmt.Fprintf(c.log, "etcd healthy on %s\n", client)

	host := fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if err := c.spawn("kube-apiserver", b.APIServer, nil,
		"--etcd-servers="+client,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--tls-cert-file="+p.serverCert, "--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caCert,
		"--service-account-issuer="+host, "--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// No kubelets, no endpoints of its own to publish on loopback.
		"--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(c.work, "apiserver-certs"),
		"--profiling=false"); err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host:            host,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: p.clientCertPEM, KeyData: p.clientKeyPEM},
		QPS:             100, Burst: 200,
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	cert, err := tls.X509KeyPair(p.clientCertPEM, p.clientKeyPEM)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	if err := waitHTTP(ctx, hc, host+"/readyz", "ok"); err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %w", err)
	}
	// One system:masters certificate for helm and every component: RBAC
	// is not what this cluster is for.
	c.Kubeconfig = filepath.Join(c.work, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["localkube"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: p.caPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: p.clientCertPEM, ClientKeyData: p.clientKeyPEM}
	kc.Contexts["localkube"] = &clientcmdapi.Context{Cluster: "localkube", AuthInfo: "admin"}
	kc.CurrentContext = "localkube"
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return err
	}
	if b.ControllerManager == "" {
		return nil
	}

	// --secure-port=0: neither serves anything, so neither needs a port
	// or delegated authentication.
	if err := c.spawn("kube-controller-manager", b.ControllerManager, nil,
		"--kubeconfig="+c.Kubeconfig, "--secure-port=0", "--leader-elect=false",
		"--controllers="+strings.Join(Controllers, ","),
		"--service-account-private-key-file="+p.saKey, "--root-ca-file="+p.caCert,
		// An autoscaler raises a new Deployment to its minimum at its
		// first sync: 15s by default, a wait in every install.
		"--horizontal-pod-autoscaler-sync-period=2s",
		"--profiling=false"); err != nil {
		return err
	}
	if err := c.spawn("kube-scheduler", b.Scheduler, nil,
		"--kubeconfig="+c.Kubeconfig, "--secure-port=0", "--leader-elect=false", "--profiling=false"); err != nil {
		return err
	}
	if b.Kwok != "" {
		args := []string{"--kubeconfig=" + c.Kubeconfig, "--manage-all-nodes=true",
			// kwokctl's default: nodes renew a Lease, as kubelets do.
			"--node-lease-duration-seconds=40",
			// Pod IPs, out of the Service range and roomy: kwok's default
			// /24 holds 254 pods.
			"--cidr=10.244.0.0/16"}
		for _, s := range b.KwokStages {
			args = append(args, "--config="+s)
		}
		// HOME: kwok reads ~/.kwok; this one is empty.
		if err := c.spawn("kwok", b.Kwok, []string{"HOME=" + c.work}, args...); err != nil {
			return err
		}
	}
	// The controllers act once the default namespace has its account.
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	for {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager made no ServiceAccount: %w", ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) spawn(name, bin string, env []string, args ...string) error {
	logPath := filepath.Join(c.work, name+".log")
	f, err := os.Create(logPath) //nolint:gosec // G304: under the caller's work directory
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...) //nolint:gosec // G204: the binaries the caller built
	cmd.Stdout, cmd.Stderr = f, f
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	// Killed with us even if we are killed; its own process group so a
	// terminal's Ctrl-C reaches it only through us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.procs = append(c.procs, cmd)
	c.logs = append(c.logs, logPath)
	go func() { _ = cmd.Wait(); f.Close() }()
	return nil
}

// Stop ends the processes, newest first: SIGTERM, then SIGKILL after 10s.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i].Process
		_ = p.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			for p.Signal(syscall.Signal(0)) == nil {
				time.Sleep(50 * time.Millisecond)
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Kill()
		}
	}
	c.procs = nil
}

// Tails returns the end of each process's log, for a failure's report.
func (c *Cluster) Tails() string { return c.tails() }

func (c *Cluster) tails() string {
	var b strings.Builder
	for _, l := range c.logs {
		data, _ := os.ReadFile(l) //nolint:gosec // G304: a log this Cluster wrote
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", filepath.Base(l), data)
	}
	return b.String()
}

// waitHTTP polls url until it answers 200 with want in the body.
func waitHTTP(ctx context.Context, hc *http.Client, url, want string) error {
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(want)) {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}
