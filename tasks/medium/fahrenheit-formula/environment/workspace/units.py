"""Temperature conversions."""


def to_celsius(fahrenheit):
    return (fahrenheit - 32) * 5 / 9


def to_fahrenheit(celsius):
    return celsius * 5 / 9 + 32
