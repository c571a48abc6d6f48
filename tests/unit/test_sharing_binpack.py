"""Binpack choice on hand-worked examples, the seed's own among them."""

from hivebatch.sharing import choose_binpack, fitting, node_fits


def test_seed_example_picks_the_gpu_with_least_memory_left_that_fits() -> None:
    # GPU0 12207, GPU1 8138, GPU2 4069, GPU3 16276 MiB free; a request of 8138 → GPU1
    free = {0: 12207, 1: 8138, 2: 4069, 3: 16276}
    assert fitting(free, 8138) == [0, 1, 3]
    assert choose_binpack(free, 8138) == 1


def test_gpu_that_is_too_small_is_filtered_even_when_it_is_the_tightest() -> None:
    free = {0: 12207, 1: 8137, 2: 4069, 3: 16276}
    assert choose_binpack(free, 8138) == 0


def test_node_whose_gpus_each_have_4069_free_refuses_8138_though_its_total_is_8138() -> None:
    n2 = [4069, 4069]
    n3 = [8138, 0]
    assert sum(n2) == 8138
    assert not node_fits(n2, 8138)
    assert node_fits(n3, 8138)
    assert choose_binpack({("n2", 0): 4069, ("n2", 1): 4069}, 8138) is None
    assert choose_binpack({("n2", 0): 4069, ("n2", 1): 4069, ("n3", 0): 8138}, 8138) == ("n3", 0)


def test_exact_fit_wins_and_ties_follow_the_tie_break_then_input_order() -> None:
    assert choose_binpack({"a": 9000, "b": 8138, "c": 8138}, 8138) == "b"
    assert choose_binpack({"a": 9000, "b": 8138, "c": 8138}, 8138, tie_break=lambda k: k != "c") == "c"


def test_nothing_fits_in_an_empty_or_full_cluster() -> None:
    assert choose_binpack({}, 1) is None
    assert choose_binpack({0: 0, 1: 0}, 1) is None


def test_packing_several_slices_fills_one_gpu_before_opening_another() -> None:
    free = {0: 32768, 1: 32768}
    placed = []
    for _ in range(4):
        k = choose_binpack(free, 8192)
        assert k is not None
        free[k] -= 8192
        placed.append(k)
    assert placed == [0, 0, 0, 0]
    assert choose_binpack(free, 8192) == 1
