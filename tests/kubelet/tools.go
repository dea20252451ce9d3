//go:build tools

// Package tools keeps kubelet's main package in this module's build list.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
