// Command plot draws the retry storm: downstream requests per 100 ms window
// for each strategy, from the CSV that bench/cmd/results writes.
//
//	go run ./plot storm.csv storm.png
package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: plot storm.csv storm.png")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

// The CSV: a header "clients,strategy,window_ms,requests", then one row per
// window.
func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comment = '#' // the generator's first line says the file is generated
	rows, err := r.ReadAll()
	if err != nil {
		return err
	}
	if len(rows) < 2 {
		return fmt.Errorf("%s has no data", in)
	}
	series := map[string]plotter.XYs{}
	var order []string
	clients := ""
	for i, r := range rows[1:] {
		if len(r) != 4 {
			return fmt.Errorf("%s row %d: want 4 fields, got %d", in, i+2, len(r))
		}
		if clients == "" {
			clients = r[0]
		}
		if r[0] != clients {
			continue // the plot shows the largest storm only: the first in the file
		}
		ms, err1 := strconv.ParseFloat(r[2], 64)
		n, err2 := strconv.ParseFloat(r[3], 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%s row %d: not numbers: %v", in, i+2, r)
		}
		if _, ok := series[r[1]]; !ok {
			order = append(order, r[1])
		}
		series[r[1]] = append(series[r[1]], plotter.XY{X: ms / 1000, Y: n})
	}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("Retry storm: %s clients fail together at t = 0", clients)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "downstream requests per 100 ms"
	p.Legend.Top = true
	colors := []color.RGBA{{R: 214, G: 39, B: 40, A: 255}, {R: 31, G: 119, B: 180, A: 255}, {R: 44, G: 160, B: 44, A: 255}, {R: 148, G: 103, B: 189, A: 255}}
	for i, name := range order {
		line, err := plotter.NewLine(series[name])
		if err != nil {
			return err
		}
		line.Color = colors[i%len(colors)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(name, line)
	}
	p.Add(plotter.NewGrid())
	return p.Save(10*vg.Inch, 5*vg.Inch, out)
}
