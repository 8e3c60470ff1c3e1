def test_fails_on_purpose():
    print("some stdout from the guest")
    assert 1 + 1 == 3

def test_ok():
    pass
