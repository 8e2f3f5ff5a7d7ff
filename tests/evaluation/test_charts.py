"""Server-side SVG charts: sizes follow the values and every label is escaped."""

from evaluation.charts import Point, bar_chart, scatter_chart


def test_bars_are_scaled_to_the_maximum_and_labels_are_escaped():
    # when
    svg = str(bar_chart("ndcg@10", [Point("<script>alert(1)</script>", 1.0), Point("half", 0.5)]))

    # then: the full bar spans the plot (560 − 220 − 60 = 280 px), the half one half of it
    assert 'width="280.0"' in svg and 'width="140.0"' in svg
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_the_scatter_places_the_faster_better_run_up_and_left():
    # when
    svg = str(scatter_chart("latency vs quality", [Point("slow", 0.9, x=100.0), Point("fast", 0.95, x=10.0)],
                            x_label="p50 ms", y_label="ndcg@10"))

    # then
    circles = [part.split('"')[:4] for part in svg.split("<circle cx=")[1:]]
    (slow_x, _a, _b, slow_y), (fast_x, _c, _d, fast_y) = [(float(c[1]), 0, 0, float(c[3])) for c in circles]
    assert fast_x < slow_x and fast_y < slow_y  # SVG y grows downwards


def test_no_points_draw_nothing():
    assert str(scatter_chart("empty", [], x_label="x", y_label="y")) == ""
