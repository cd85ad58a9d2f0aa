//! A board's user controls, over any board's `embedded-hal` pins: a [`StatusLight`] that
//! shows whether a training run goes on, and a [`StartButton`] whose presses are
//! debounced and reported once each, so a person at the board can start a fine-tune
//! without the host. Which pin level means "lit" or "pressed" is the board's to say
//! (`PinState::Low` for the usual active-low LEDs and buttons).

use embedded_hal::digital::{InputPin, OutputPin, PinState};

/// An LED lit while something goes on; the pin is written only when that changes.
pub struct StatusLight<P> {
    pin: P,
    lit_level: PinState,
    shown: Option<bool>,
}

impl<P: OutputPin> StatusLight<P> {
    /// The LED on `pin`, lit when the pin is at `lit_level`. The pin is not written until
    /// the first [`StatusLight::show`].
    pub fn new(pin: P, lit_level: PinState) -> Self {
        Self { pin, lit_level, shown: None }
    }

    /// Lights the LED (`lit`) or darkens it.
    pub fn show(&mut self, lit: bool) -> Result<(), P::Error> {
        if self.shown == Some(lit) {
            return Ok(());
        }
        let level = if lit { self.lit_level } else { !self.lit_level };
        self.pin.set_state(level)?;
        self.shown = Some(lit);
        Ok(())
    }
}

/// A push button read by polling, debounced by counting reads: its state changes only
/// after `debounce_reads` reads in a row disagree with it. A button held down when the
/// board starts counts only once it has been released and pressed again.
pub struct StartButton<P> {
    pin: P,
    pressed_level: PinState,
    debounce_reads: u16,
    /// The debounced state; `true` at start, so a held button must be released first.
    pressed: bool,
    /// Reads in a row that disagreed with `pressed`.
    disagreeing: u16,
}

impl<P: InputPin> StartButton<P> {
    /// The button on `pin`, pressed when the pin reads `pressed_level`. Reads a contact
    /// bounce cannot span suffice for `debounce_reads`: the main loop's reads come faster
    /// when it is idle, which is when a press is taken.
    pub fn new(pin: P, pressed_level: PinState, debounce_reads: u16) -> Self {
        Self {
            pin,
            pressed_level,
            debounce_reads: debounce_reads.max(1),
            pressed: true,
            disagreeing: 0,
        }
    }

    /// Reads the pin once; `true` exactly once per press, when the press has lasted
    /// `debounce_reads` reads.
    pub fn pressed(&mut self) -> Result<bool, P::Error> {
        let high = self.pin.is_high()?;
        let now_pressed = high == (self.pressed_level == PinState::High);
        if now_pressed == self.pressed {
            self.disagreeing = 0;
            return Ok(false);
        }
        self.disagreeing += 1;
        if self.disagreeing < self.debounce_reads {
            return Ok(false);
        }
        self.pressed = now_pressed;
        self.disagreeing = 0;
        Ok(now_pressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::convert::Infallible;
    use std::vec::Vec;

    /// A pin that records what was written and plays back what it reads.
    #[derive(Default)]
    struct FakePin {
        written: Vec<PinState>,
        reads: Vec<bool>,
        next: usize,
    }

    impl embedded_hal::digital::ErrorType for FakePin {
        type Error = Infallible;
    }

    impl OutputPin for FakePin {
        fn set_low(&mut self) -> Result<(), Infallible> {
            self.written.push(PinState::Low);
            Ok(())
        }
        fn set_high(&mut self) -> Result<(), Infallible> {
            self.written.push(PinState::High);
            Ok(())
        }
    }

    impl InputPin for FakePin {
        fn is_high(&mut self) -> Result<bool, Infallible> {
            let level = self.reads[self.next];
            self.next += 1;
            Ok(level)
        }
        fn is_low(&mut self) -> Result<bool, Infallible> {
            self.is_high().map(|high| !high)
        }
    }

    /// Polls a button over `levels` (pin high or low), returning the reads that reported a press.
    fn presses(levels: &[bool], pressed_level: PinState, debounce_reads: u16) -> Vec<usize> {
        let pin = FakePin { reads: levels.to_vec(), ..FakePin::default() };
        let mut button = StartButton::new(pin, pressed_level, debounce_reads);
        (0..levels.len()).filter(|_| button.pressed().unwrap()).collect()
    }

    #[test]
    fn an_active_low_light_is_written_only_on_a_change() {
        let mut light = StatusLight::new(FakePin::default(), PinState::Low);
        for lit in [false, false, true, true, false] {
            light.show(lit).unwrap();
        }
        assert_eq!(light.pin.written, [PinState::High, PinState::Low, PinState::High]);
    }

    #[test]
    fn a_press_counts_once_after_the_debounce_reads() {
        let (up, down) = (false, true);
        let mut levels = [up; 4].to_vec();
        levels.extend([down; 5]);
        levels.extend([up; 4]);
        assert_eq!(presses(&levels, PinState::High, 3), [6]);
    }

    #[test]
    fn bounces_shorter_than_the_debounce_reads_are_ignored() {
        let (up, down) = (true, false);
        let levels = [up, up, up, down, up, down, down, up, down, down, down, down, up];
        assert_eq!(presses(&levels, PinState::Low, 3), [10]);
    }

    #[test]
    fn a_button_held_at_start_must_be_released_first() {
        let down = true;
        assert!(presses(&[down; 20], PinState::High, 2).is_empty());
        let mut levels = [down; 5].to_vec();
        levels.extend([false; 2]);
        levels.extend([down; 2]);
        assert_eq!(presses(&levels, PinState::High, 2), [8]);
    }
}
