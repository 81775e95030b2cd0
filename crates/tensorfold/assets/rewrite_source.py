"""A small least-recently-used cache with statistics, used as the long code file of `tensorfold bench --drafts`."""

from collections import OrderedDict


class CacheStats:
    """Counts of hits, misses and evictions."""

    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def ratio(self):
        total = self.hits + self.misses
        if total == 0:
            return 0.0
        return self.hits / total

    def __repr__(self):
        return f"CacheStats(hits={self.hits}, misses={self.misses}, evictions={self.evictions})"


class LRUCache:
    """Maps keys to values, forgetting the least recently used key when full."""

    def __init__(self, capacity):
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.data = OrderedDict()
        self.stats = CacheStats()

    def __len__(self):
        return len(self.data)

    def __contains__(self, key):
        return key in self.data

    def get(self, key, default=None):
        if key not in self.data:
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        self.data.move_to_end(key)
        return self.data[key]

    def put(self, key, value):
        if key in self.data:
            self.data.move_to_end(key)
        self.data[key] = value
        while len(self.data) > self.capacity:
            self.data.popitem(last=False)
            self.stats.evictions += 1

    def pop(self, key, default=None):
        return self.data.pop(key, default)

    def clear(self):
        self.data.clear()

    def keys(self):
        return list(self.data.keys())

    def items(self):
        return list(self.data.items())


def memoize(capacity=128):
    """Decorator: cache a function's results by its positional arguments."""

    def decorate(func):
        cache = LRUCache(capacity)

        def wrapper(*args):
            result = cache.get(args)
            if result is None and args not in cache:
                result = func(*args)
                cache.put(args, result)
            return result

        wrapper.cache = cache
        wrapper.__name__ = func.__name__
        wrapper.__doc__ = func.__doc__
        return wrapper

    return decorate


@memoize(capacity=64)
def fibonacci(n):
    """Return the n-th Fibonacci number."""
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def test_eviction_order():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert "a" in cache
    assert "b" not in cache
    assert cache.stats.evictions == 1


def test_memoize():
    assert fibonacci(30) == 832040
    assert fibonacci.cache.stats.hits > 0


if __name__ == "__main__":
    test_eviction_order()
    test_memoize()
    print("ok", fibonacci.cache.stats)
