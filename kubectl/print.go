package kubectl

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/internal/ipreport"
)

// Output formats besides the default table.
var (
	reportFormats  = []string{"wide", "json", "yaml"}
	outcomeFormats = []string{"json", "yaml"}
)

func checkFormat(f string, allowed []string) error {
	if f == "" {
		return nil
	}
	for _, a := range allowed {
		if f == a {
			return nil
		}
	}
	return fmt.Errorf("--output=%q: must be one of %s", f, strings.Join(allowed, ", "))
}

// printData prints v as JSON or YAML, and reports false for any other
// format.
func printData(w io.Writer, v any, format string) (bool, error) {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = w.Write(b)
		return true, err
	}
	return false, nil
}

// printReport prints rep in format: a table (wide adds the published
// capacity and the holders), JSON or YAML.
func printReport(w io.Writer, rep ipreport.Report, format string, noHeaders bool) error {
	if done, err := printData(w, rep, format); done {
		return err
	}
	wide := format == "wide"
	published, grows := wide, wide
	for _, n := range rep.Nodes {
		published = published || n.Published != nil
		grows = grows || n.MaxCapacity != nil || n.MaxCapacityInvalid != ""
	}
	ipam := false
	for _, n := range rep.Nodes {
		ipam = ipam || n.IPAMUsed != nil
	}
	tw := printers.GetNewTabWriter(w)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	if !noHeaders {
		h := []string{"NODE", "CAPACITY", "USED", "FREE", "WAITING", "SOURCE"}
		if published {
			h = append(h, "PUBLISHED")
		}
		if grows {
			h = append(h, "MAY-GROW-TO")
		}
		if ipam {
			h = append(h, "IPAM-USED")
		}
		if wide {
			h = append(h, "HOLDERS")
		}
		row(h...)
	}
	for _, n := range rep.Nodes {
		cells := []string{n.Name, itoa(n.Capacity), itoa(n.Used), itoa(n.Free), strconv.Itoa(len(n.Waiting)), source(n)}
		if published {
			p := "-"
			if n.Published != nil {
				p = itoa(*n.Published)
			}
			cells = append(cells, p)
		}
		if grows {
			cells = append(cells, mayGrowTo(n))
		}
		if ipam {
			cells = append(cells, optional(n.IPAMUsed))
		}
		if wide {
			cells = append(cells, pods(n.Holders))
		}
		row(cells...)
	}
	t := rep.Totals
	cells := []string{fmt.Sprintf("TOTAL (%d nodes)", t.Nodes), itoa(t.Capacity), itoa(t.Used), itoa(t.Free), strconv.Itoa(t.Waiting),
		fmt.Sprintf("%d full, %d invalid", t.Full, t.Invalid)}
	if published {
		cells = append(cells, "")
	}
	if grows {
		cells = append(cells, "")
	}
	if ipam {
		cells = append(cells, "")
	}
	if wide {
		cells = append(cells, "waiting: "+pods(rep.Waiting))
	}
	row(cells...)
	return tw.Flush()
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// mayGrowTo is what a node's pool may grow to, as its capacity source
// says: a count, "invalid", or "-" when the source does not say.
func mayGrowTo(n ipreport.Node) string {
	switch {
	case n.MaxCapacity != nil:
		return itoa(*n.MaxCapacity)
	case n.MaxCapacityInvalid != "":
		return "invalid"
	}
	return "-"
}

// source says where a node's capacity comes from, and if it is invalid; a
// capacity source is named with the object it read:
// "source cilium (ciliumnodes.cilium.io/node-1)".
func source(n ipreport.Node) string {
	s := n.Source
	if n.Origin != "" {
		name, object, _ := strings.Cut(n.Origin, " ")
		s += " " + name
		if object != "" {
			s += " (" + object + ")"
		}
	}
	if n.Invalid != "" {
		return "invalid " + s
	}
	return s
}

// pods lists pods as ns/name=IPs; "<none>" when empty, as kubectl does.
func pods(ps []ipreport.Pod) string {
	if len(ps) == 0 {
		return "<none>"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s/%s=%d", p.Namespace, p.Name, p.IPs)
	}
	return strings.Join(out, ",")
}

// optional is v, or "-" when nil.
func optional(v *int64) string {
	if v == nil {
		return "-"
	}
	return itoa(*v)
}
