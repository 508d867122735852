package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestComposePrometheusConfig: docker-compose.yml's Prometheus
// configuration is one promtool accepts, and every service it scrapes runs
// its worker with -metrics-addr on the port it scrapes.
func TestComposePrometheusConfig(t *testing.T) {
	promtool := needPrometheus(t, "promtool")
	const config = "../../deploy/prometheus.yml"
	if out, err := exec.Command(promtool, "check", "config", config).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config %s: %v\n%s", config, err, out)
	}
	cfg, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^\s*- names: \[([^\]]*)\]\s*$`).FindSubmatch(cfg)
	port := regexp.MustCompile(`(?m)^\s*port: (\d+)\s*$`).FindSubmatch(cfg)
	if names == nil || port == nil {
		t.Fatalf("%s: no dns_sd_configs names and port", config)
	}
	compose, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	services := string(compose[strings.Index(string(compose), "\nservices:\n"):])
	if !strings.Contains(services, "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro") {
		t.Errorf("docker-compose.yml does not mount %s into its prometheus service", config)
	}
	for _, svc := range strings.Split(string(names[1]), ",") {
		svc = strings.TrimSpace(svc)
		i := strings.Index(services, "\n  "+svc+":\n")
		if i < 0 {
			t.Errorf("%s scrapes service %s, which docker-compose.yml lacks", config, svc)
			continue
		}
		block := services[i+1:]
		if end := regexp.MustCompile(`\n  [a-z]`).FindStringIndex(block[1:]); end != nil {
			block = block[:end[0]+1]
		}
		if want := `"-metrics-addr", ":` + string(port[1]) + `"`; !strings.Contains(block, want) {
			t.Errorf("docker-compose.yml's %s runs no worker with %s:\n%s", svc, want, block)
		}
	}
}
