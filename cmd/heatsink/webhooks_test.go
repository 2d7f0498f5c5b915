package main

import (
	"flag"
	"testing"
)

func TestInjectorConfigFromFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c := bindWebhookFlags(fs)
	if err := fs.Parse([]string{"--proxy-image=img:1", "--proxy-cpu-limit=", "--proxy-memory-request=32Mi", "--proxy-image-pull-policy=IfNotPresent"}); err != nil {
		t.Fatal(err)
	}
	ic, err := c.injectorConfig()
	if err != nil {
		t.Fatal(err)
	}
	if ic.Image != "img:1" || ic.PullPolicy != "IfNotPresent" || ic.Resources.Requests.Memory().String() != "32Mi" {
		t.Errorf("got %+v", ic)
	}
	if _, ok := ic.Resources.Limits["cpu"]; ok {
		t.Errorf("empty --proxy-cpu-limit must mean no CPU limit: %v", ic.Resources.Limits)
	}
	for _, bad := range [][]string{{"--proxy-cpu-request=lots"}, {"--proxy-image-pull-policy=Sometimes"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c := bindWebhookFlags(fs)
		if err := fs.Parse(bad); err != nil {
			t.Fatal(err)
		}
		if _, err := c.injectorConfig(); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}
