#!/usr/bin/env bash
# Draw slidewin's charts with gnuplot (Debian's gnuplot-nox), as SVG.
#
#   charts.sh throughput DATA OUT.svg
#       DATA: tab-separated lines "label<TAB>tps 1 client<TAB>tps 8 clients"
#       (an empty field is a bar not drawn); a clustered bar chart, log scale.
#   charts.sh web DATA OUT.svg
#       DATA: tab-separated lines "route<TAB>req/s many keys, 8 conns<TAB>many,
#       32<TAB>hot key, 8<TAB>hot, 32" (test/bench/web.sh); clustered bars.
#   charts.sh boundary DATA OUT.svg
#       DATA: tab-separated lines "algorithm<TAB>t_ms<TAB>admitted so far", as
#       test/bench/boundary.sql prints them; one line per algorithm over time.
#
# Exits non-zero, with gnuplot's message, if the chart could not be drawn or
# the file written is not an SVG.
set -euo pipefail

[[ $# -eq 3 ]] || { echo "usage: $0 throughput|web|boundary DATA OUT.svg" >&2; exit 2; }
kind=$1 data=$2 out=$3
command -v gnuplot >/dev/null || { echo "charts: gnuplot is not installed (test/deps.sh installs gnuplot-nox)" >&2; exit 1; }
[[ -s $data ]] || { echo "charts: no data in $data" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

case $kind in
throughput)
	# gnuplot reads "?" as a missing value
	awk -F '\t' 'BEGIN { OFS = "\t" } { for (i = 2; i <= 3; i++) if ($i == "") $i = "?"; print "\"" $1 "\"", $2, $3 }' \
		"$data" >"$tmp/data"
	gnuplot <<-GP
		set terminal svg size 1100,620 dynamic font "sans,11" background "white"
		set output "$out"
		set encoding utf8
		set termoption noenhanced
		set datafile separator "\t"
		set datafile missing "?"
		set title "slidewin: throughput per workload (make bench, one run)"
		set ylabel "transactions per second (log scale)"
		set logscale y
		set yrange [100:*]
		set grid ytics
		set style data histogram
		set style histogram cluster gap 1
		set style fill solid 0.85 border -1
		set boxwidth 0.9
		set xtics rotate by -35 left font "sans,10" nomirror
		set bmargin 14
		set rmargin 12
		set key top right
		plot "$tmp/data" using 2:xtic(1) title "1 client" lc rgb "#4a7ab5", \
		     "" using 3 title "8 clients" lc rgb "#e08a2c"
	GP
	;;
web)
	awk -F '\t' 'BEGIN { OFS = "\t" } { for (i = 2; i <= 5; i++) if ($i == "") $i = "?"; print "\"" $1 "\"", $2, $3, $4, $5 }' \
		"$data" >"$tmp/data"
	gnuplot <<-GP
		set terminal svg size 1100,620 dynamic font "sans,11" background "white"
		set output "$out"
		set encoding utf8
		set termoption noenhanced
		set datafile separator "\t"
		set datafile missing "?"
		set title "Express routes: requests per second (make bench-web, one run)"
		set ylabel "requests per second"
		set yrange [0:*]
		set grid ytics
		set style data histogram
		set style histogram cluster gap 1
		set style fill solid 0.85 border -1
		set boxwidth 0.9
		set xtics rotate by -35 left font "sans,10" nomirror
		set bmargin 10
		set key top right
		plot "$tmp/data" using 2:xtic(1) title "many keys, 8 conns" lc rgb "#4a7ab5", \
		     "" using 3 title "many keys, 32 conns" lc rgb "#9cbbe0", \
		     "" using 4 title "hot key, 8 conns" lc rgb "#e08a2c", \
		     "" using 5 title "hot key, 32 conns" lc rgb "#f2c08a"
	GP
	;;
boundary)
	# one block per algorithm, separated by two blank lines, for "index"
	awk -F '\t' 'NR > 1 && $1 != prev { printf "\n\n" } { print $2 / 1000 "\t" $3; prev = $1 }' \
		"$data" >"$tmp/data"
	mapfile -t algos < <(awk -F '\t' '$1 != prev { print $1; prev = $1 }' "$data")
	[[ ${#algos[@]} -ge 1 ]] || { echo "charts: no algorithm in $data" >&2; exit 1; }
	plots=()
	colors=("#d62728" "#1f77b4" "#2ca02c" "#9467bd")
	for i in "${!algos[@]}"; do
		plots+=("\"$tmp/data\" index $i using 1:2 with steps lw 2.5 lc rgb \"${colors[i % 4]}\" title \"${algos[i]}\"")
	done
	plot_line=$(IFS=,; echo "${plots[*]}")
	gnuplot <<-GP
		set terminal svg size 900,520 dynamic font "sans,12" background "white"
		set output "$out"
		set encoding utf8
		set termoption noenhanced
		set datafile separator "\t"
		set title "The boundary experiment: limit 50 per 10 s, one call every 10 ms from 9 s to 11 s"
		set xlabel "time (s); fixed windows turn over at 10 s"
		set ylabel "calls admitted so far"
		set xrange [9:11]
		set yrange [0:110]
		set ytics 10
		set grid
		set key bottom right box opaque
		set arrow from 10, graph 0 to 10, graph 1 nohead dt 2 lc rgb "#777777"
		set arrow from graph 0, first 50 to graph 1, first 50 nohead dt 3 lc rgb "#1f77b4"
		set arrow from graph 0, first 100 to graph 1, first 100 nohead dt 3 lc rgb "#d62728"
		set label "lim = 50" at 9.03, 53 textcolor rgb "#1f77b4"
		set label "2 × lim = 100" at 9.03, 103 textcolor rgb "#d62728"
		plot $plot_line
	GP
	;;
*)
	echo "charts: unknown chart '$kind'" >&2
	exit 2
	;;
esac
grep -q '<svg' "$out" || { echo "charts: $out is not an SVG" >&2; exit 1; }
