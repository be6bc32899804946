package soak

import (
	"math"
	"time"
)

// Point is one reading of a process's resource at a time.
type Point struct {
	At    time.Time
	Value float64
}

// Slope is a least-squares line's slope per hour, with its 95% interval.
type Slope struct {
	PerHour, Lo, Hi float64
	// N is the points fitted.
	N int
}

// Flat reports whether the interval holds 0 or the growth is within tol
// per hour either way: within noise.
func (s Slope) Flat(tol float64) bool {
	return (s.Lo <= 0 && s.Hi >= 0) || math.Abs(s.PerHour) <= tol
}

// SecondHalfSlope fits a line to the points of the second half of the
// run (from the midpoint of the first and last point's times), so that
// warm-up does not read as growth. Fewer than 3 points give NaN.
func SecondHalfSlope(points []Point) Slope {
	if len(points) < 3 {
		return Slope{PerHour: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), N: len(points)}
	}
	mid := points[0].At.Add(points[len(points)-1].At.Sub(points[0].At) / 2)
	var xs, ys []float64
	for _, p := range points {
		if !p.At.Before(mid) {
			xs = append(xs, p.At.Sub(mid).Hours())
			ys = append(ys, p.Value)
		}
	}
	return fit(xs, ys)
}

// fit is ordinary least squares of y on x, the slope's interval from its
// standard error and Student's t.
func fit(xs, ys []float64) Slope {
	n := float64(len(xs))
	if len(xs) < 3 {
		return Slope{PerHour: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), N: len(xs)}
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return Slope{PerHour: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), N: len(xs)}
	}
	b := sxy / sxx
	var sse float64
	for i := range xs {
		r := ys[i] - (my + b*(xs[i]-mx))
		sse += r * r
	}
	se := math.Sqrt(sse / (n - 2) / sxx)
	h := t975(len(xs)-2) * se
	return Slope{PerHour: b, Lo: b - h, Hi: b + h, N: len(xs)}
}

// t975 is Student's t 97.5% quantile for df degrees of freedom: a table to
// 30, then the normal's 1.96 with the first correction term.
func t975(df int) float64 {
	table := []float64{math.NaN(), 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < len(table) {
		return table[df]
	}
	z := 1.959964
	return z + (z*z*z+z)/(4*float64(df))
}
