from proletarian_di import enqueue, process_next_job


def test_enqueue_and_process(backend, pool):
    conn = backend.connect()
    enqueue(conn, "hello", {"n": 1})
    conn.commit()
    conn.close()
    seen = []
    assert process_next_job(pool, lambda t, p: seen.append((t, p))) is True
    assert seen == [("hello", {"n": 1})]
    assert backend.archived() == [("hello", "success", 1)]
