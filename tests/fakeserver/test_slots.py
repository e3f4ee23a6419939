import asyncio

import pytest

from gridroute.fakeserver.slots import QueueFull, SlotPool


def test_fifo_admission_in_arrival_order() -> None:
    async def main() -> list[int]:
        pool = SlotPool(1)
        order: list[int] = []

        async def user(i: int) -> None:
            await pool.acquire()
            order.append(i)
            await asyncio.sleep(0)
            pool.release()

        await pool.acquire()  # hold the only slot so everyone queues
        tasks = [asyncio.create_task(user(i)) for i in range(5)]
        await asyncio.sleep(0)
        assert (pool.running, pool.waiting) == (1, 5)
        pool.release()
        await asyncio.gather(*tasks)
        assert (pool.running, pool.waiting) == (0, 0)
        return order

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]


def test_queue_bound_raises_queue_full() -> None:
    async def main() -> None:
        pool = SlotPool(1, max_queue=1)
        await pool.acquire()
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        with pytest.raises(QueueFull):
            await pool.acquire()
        pool.release()
        await waiter
        assert (pool.running, pool.waiting) == (1, 0)

    asyncio.run(main())


def test_cancelled_waiter_leaves_the_queue_at_once() -> None:
    async def main() -> None:
        pool = SlotPool(1)
        await pool.acquire()
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        assert pool.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert pool.waiting == 0
        pool.release()
        assert pool.running == 0

    asyncio.run(main())


def test_slot_granted_to_a_cancelled_task_is_passed_on() -> None:
    async def main() -> None:
        pool = SlotPool(1)
        await pool.acquire()
        first = asyncio.create_task(pool.acquire())
        second = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        pool.release()  # grants `first`, which is cancelled before it resumes
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await second
        assert (pool.running, pool.waiting) == (1, 0)

    asyncio.run(main())


def test_resize_grows_at_once_and_shrinks_as_requests_finish() -> None:
    async def main() -> None:
        pool = SlotPool(1)
        await pool.acquire()
        waiters = [asyncio.create_task(pool.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        pool.resize(3)
        assert (pool.running, pool.waiting) == (3, 1)
        pool.resize(1)
        pool.release()
        pool.release()
        assert (pool.running, pool.waiting) == (1, 1)  # still over: nobody admitted
        pool.release()
        await asyncio.gather(*waiters)
        assert (pool.running, pool.waiting) == (1, 0)

    asyncio.run(main())
